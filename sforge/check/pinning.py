"""Pinning rules: FROM with a tag, apt and pip packages with versions, the base-image ARG."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from sforge.benchmark.dockerfile import (
    BASE_ARG,
    WORK_ARG,
    Instruction,
    Token,
    expand_word,
    run_script,
    simple_commands,
    strip_prefix,
    tokenize_shell,
)
from sforge.check.context import CheckContext, context_files
from sforge.check.findings import Finding

_APT_ARG_OPTS = {"-o", "--option", "-t", "--target-release", "--default-release", "-c",
                 "--config-file", "-a", "--host-architecture"}
_PIP_ARG_OPTS = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target",
    "--platform", "--python-version", "--implementation", "--abi", "--root", "--prefix",
    "--src", "--upgrade-strategy", "--progress-bar", "--root-user-action", "-i",
    "--index-url", "--extra-index-url", "-f", "--find-links", "--no-binary", "--only-binary",
    "-C", "--config-settings", "--global-option", "--report", "--log", "--proxy",
    "--retries", "--timeout", "--trusted-host", "--cert", "--client-cert", "--cache-dir",
    "--exists-action", "--python", "--keyring-provider",
}


def _subcommand(args: list[Token], arg_opts: set[str]) -> tuple[str | None, list[Token]]:
    """(subcommand, the words after it) of `tool [options] sub args`."""
    i = 0
    while i < len(args):
        word = args[i].text
        if word in arg_opts:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return word, args[i + 1:]
    return None, []


def _operands(args: list[Token], arg_opts: set[str]) -> Iterator[tuple[Token, Token | None]]:
    """(operand, None) and (option value, option) pairs of a subcommand's words."""
    i = 0
    while i < len(args):
        word = args[i].text
        if word in arg_opts:
            if i + 1 < len(args):
                yield args[i + 1], args[i]
            i += 2
        elif word.startswith("-"):
            if "=" in word and word.split("=", 1)[0] in arg_opts:
                opt, _, value = word.partition("=")
                yield Token(value, args[i].line), Token(opt, args[i].line)
            i += 1
        else:
            yield args[i], None
            i += 1


def _pip_args(cmd: list[Token]) -> list[Token] | None:
    """The words after `install` for pip, pip3, python -m pip, uv pip; else None."""
    if not cmd:
        return None
    exe = PurePosixPath(cmd[0].text).name
    rest: list[Token] | None = None
    if re.fullmatch(r"pip\d*(\.\d+)?", exe):
        rest = cmd[1:]
    elif re.fullmatch(r"python\d*(\.\d+)?", exe):
        for i, tok in enumerate(cmd[1:-1], 1):
            if tok.text == "-m":
                rest = cmd[i + 2:] if re.fullmatch(r"pip\d*", cmd[i + 1].text) else None
                break
    elif exe == "uv" and len(cmd) > 1 and cmd[1].text == "pip":
        rest = cmd[2:]
    if rest is None:
        return None
    sub, after = _subcommand(rest, _PIP_ARG_OPTS)
    return after if sub == "install" else None


def _apt_args(cmd: list[Token]) -> list[Token] | None:
    if not cmd or PurePosixPath(cmd[0].text).name not in ("apt-get", "apt", "aptitude"):
        return None
    sub, after = _subcommand(cmd[1:], _APT_ARG_OPTS)
    return after if sub == "install" else None


def _pip_requirement_pinned(req: str) -> bool | None:
    """True/False for a requirement; None when it is not a registry requirement (a path, a
    wheel, a URL) or cannot be judged (an unexpanded variable)."""
    req = req.strip()
    if not req or "$" in req or req.startswith((".", "/", "~")):
        return None
    if re.search(r"\.(whl|tar\.gz|zip|tar\.bz2)$", req) or "://" in req:
        if req.startswith("git+") and not re.search(r"@[^/@]+$", req.split("#")[0]):
            return False  # a VCS URL without a revision
        return None
    if " @ " in req:
        return None  # name @ url
    return re.search(r"===?\s*[^\s=,;]+", req) is not None



def check_from(path: Path, ins: Instruction, global_args: dict[str, str | None],
                stages: set[str], ctx: CheckContext, add) -> bool:
    """Findings for a FROM: tag pinning, ${BASE_IMAGE}/${WORK_IMAGE}; → whether it uses one."""
    words = [w for w in ins.text.split() if not w.startswith("--")]
    if not words:
        return False
    image = words[0]
    if len(words) >= 3 and words[1].lower() == "as":
        stages.add(words[2].lower())
    if re.fullmatch(rf"\$\{{?{WORK_ARG}\}}?", image):
        if WORK_ARG not in global_args:
            add(Finding(path, ins.line, "base-image",
                        f"FROM ${{{WORK_ARG}}} needs `ARG {WORK_ARG}` before it"))
        if not (ctx.is_task and ctx.visible and "judge" in ctx.visible):
            add(Finding(path, ins.line, "base-image",
                        f"FROM ${{{WORK_ARG}}}: only a task's judge/Dockerfile gets {WORK_ARG} "
                        "(the work image's tag)"))
        return True  # the work image is built on the base already
    if re.fullmatch(rf"\$\{{?{BASE_ARG}\}}?", image):
        if BASE_ARG not in global_args:
            add(Finding(path, ins.line, "base-image",
                        f"FROM ${{{BASE_ARG}}} needs `ARG {BASE_ARG}` before it"))
        if ctx.is_task and not ctx.base:
            add(Finding(path, ins.line, "base-image",
                        f"FROM ${{{BASE_ARG}}}, but task.toml names no [environment] base, so "
                        f"sforge passes no {BASE_ARG}"))
        return True
    known = {k: v for k, v in global_args.items() if v is not None}
    resolved = expand_word(image, known)
    if "$" in resolved or resolved.lower() in stages or resolved == "scratch":
        return False
    if "@sha256:" in resolved:
        return False
    last = resolved.rsplit("/", 1)[-1]
    if ":" not in last:
        add(Finding(path, ins.line, "from-unpinned",
                    f"FROM {image}: no tag; pin a version tag (and a digest where possible)"))
    elif last.rsplit(":", 1)[1] == "latest":
        add(Finding(path, ins.line, "from-unpinned",
                    f"FROM {image}: ':latest' moves; pin a version tag"))
    return False



def check_run(path: Path, ins: Instruction, variables: dict[str, str], ctx: CheckContext,
               add) -> None:
    """Findings for apt and pip installs in a RUN without pinned versions."""
    for cmd in simple_commands(tokenize_shell(run_script(ins))):
        cmd = strip_prefix(cmd)
        apt = _apt_args(cmd)
        if apt is not None:
            for tok, opt in _operands(apt, _APT_ARG_OPTS):
                if opt is not None:
                    continue
                pkg = expand_word(tok.text, variables)
                if "$" in pkg or pkg.endswith(".deb"):
                    continue
                name, eq, version = pkg.partition("=")
                if not eq or not version:
                    name = name.split("/")[0]
                    add(Finding(path, tok.line, "apt-unpinned",
                                f"apt package {pkg!r} has no version: install {name}=<version>"))
            continue
        pip = _pip_args(cmd)
        if pip is None:
            continue
        for tok, opt in _operands(pip, _PIP_ARG_OPTS):
            value = expand_word(tok.text, variables)
            if opt is not None:
                if opt.text in ("-r", "--requirement"):
                    _check_requirements(path, tok.line, value, ctx, add)
                continue
            if _pip_requirement_pinned(value) is False:
                add(Finding(path, tok.line, "pip-unpinned", _pip_advice(value)))


def _pip_advice(req: str) -> str:
    if "://" in req:
        return f"pip package {req!r} is not pinned: add a revision, {req}@<commit>"
    name = re.split(r"[<>=!~;\[ @]", req, maxsplit=1)[0]
    return f"pip package {req!r} is not pinned: use {name}==<version>"


def _check_requirements(dockerfile: Path, line: int, name: str, ctx: CheckContext, add) -> None:
    """Check a `pip install -r FILE` whose file can be found in the build context."""
    if "$" in name:
        return
    base = PurePosixPath(name).name
    candidates = [p for p in context_files(ctx) if p.name == base]
    if len(candidates) != 1:
        return
    req = candidates[0]
    for no, raw in enumerate(req.read_text(errors="replace").splitlines(), 1):
        text = raw.split(" #", 1)[0].strip()
        if not text or text.startswith(("#", "-")):
            continue
        if _pip_requirement_pinned(text) is False:
            add(Finding(req, no, "pip-unpinned",
                        f"{_pip_advice(text)} (installed by {dockerfile.name} line {line})"))


