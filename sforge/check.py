"""`sforge check`: lint a benchmark directory against the task rules a program can check.

The rules are those of a benchmark's tasks/SCHEMA.md (EdgeBench's is the reference):
pinned images and packages, build contexts, size caps and blobs, required metadata and
NOTES.md, plus every task-definition error the loader reports. Each finding names a file
and, where one applies, the line. Nothing here needs Docker; git is used, when the
benchmark is inside a work tree, only to ask which paths are ignored.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import DefinitionError
from .loader import load_benchmark

MAX_FILE_BYTES = 1 << 20          # no single file over 1 MiB in git
MAX_TASK_BYTES = 5 << 20          # no task over 5 MiB in git
STATUSES = ("draft", "active", "deprecated", "broken")
NOTES_SECTIONS = ("What it measures", "Grading", "Data", "Reference results", "Known issues")
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
BASE_ARG = "BASE_IMAGE"
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules"}


@dataclass(frozen=True, order=True)
class Finding:
    file: Path
    line: int | None
    rule: str
    message: str
    severity: str = "error"  # "error" | "warning"


def format_findings(findings: Iterable[Finding]) -> str:
    """One line per finding: 'path:line: rule: message' (warnings say so at the end)."""
    out = []
    for f in findings:
        where = f"{f.file}:{f.line}" if f.line is not None else f"{f.file}"
        tail = " (warning)" if f.severity == "warning" else ""
        out.append(f"{where}: {f.rule}: {f.message}{tail}")
    return "\n".join(out)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


# --------------------------------------------------------------------------- TOML lines

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_KEY = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")


def _unquote_key(key: str) -> str:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', key)
    return ".".join(a or b or c for a, b, c in parts)


def toml_lines(text: str) -> dict[str, int]:
    """Dotted field → 1-based line, for every table header and key: 'judge.memory',
    'blobs[0].path', 'score.rescale'. Good enough for locating what the loader names."""
    lines: dict[str, int] = {}
    table, counts = "", {}
    depth = 0  # inside a multi-line array or inline table: no keys to find there
    for no, raw in enumerate(text.splitlines(), 1):
        if depth == 0 and (m := _HEADER.match(raw)):
            name = _unquote_key(m.group(2))
            if m.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                table = f"{name}[{counts[name]}]"
                lines.setdefault(name, no)
            else:
                table = name
            lines.setdefault(table, no)
            continue
        if depth == 0 and (m := _KEY.match(raw)):
            key = _unquote_key(m.group(1))
            lines.setdefault(f"{table}.{key}" if table else key, no)
        stripped = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'|#.*', "", raw)
        depth = max(0, depth + stripped.count("[") + stripped.count("{")
                    - stripped.count("]") - stripped.count("}"))
    return lines


def _locate(path: Path, fieldname: str | None) -> int | None:
    if not fieldname or not path.is_file():
        return None
    try:
        lines = toml_lines(path.read_text(errors="replace"))
    except OSError:
        return None
    name = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", fieldname)
    while name:
        if name in lines:
            return lines[name]
        # A parameter inside an inline table, or a missing key: the nearest enclosing entry.
        name = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", name) if re.search(r"[.\[]", name) else ""
    return None


# ------------------------------------------------------------------------- Dockerfiles

@dataclass
class Instruction:
    keyword: str                       # upper case
    line: int                          # line of the keyword
    pieces: list[tuple[int, str]]      # (line, text) of the arguments, continuations joined

    @property
    def text(self) -> str:
        return " ".join(t for _, t in self.pieces)


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with the physical line of every argument piece (backslash continuations,
    comment lines inside continuations dropped, as Docker does)."""
    out: list[Instruction] = []
    current: Instruction | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if current is None:
            if not stripped or stripped.startswith("#"):
                continue
            m = re.match(r"^\s*([A-Za-z]+)(\s+|$)(.*)$", raw)
            if not m:
                continue
            current = Instruction(m.group(1).upper(), no, [])
            body = m.group(3)
        else:
            if not stripped or stripped.startswith("#"):
                continue
            body = raw
        cont = body.rstrip().endswith("\\")
        if cont:
            body = body.rstrip()[:-1]
        current.pieces.append((no, body))
        if not cont:
            out.append(current)
            current = None
    if current is not None:
        out.append(current)
    return out


@dataclass
class Token:
    text: str
    line: int
    kind: str = "word"  # word | op | redir


_REDIR = re.compile(r"\d*(?:&>>?|>>|>&|<&|<<<|>\||>|<)(?:&?\d+-?|-)?")


def tokenize_shell(pieces: list[tuple[int, str]]) -> list[Token]:
    """Split shell text into words (quotes removed), operators and redirections, each with
    the line where it starts. Not a shell: enough to find commands and their arguments."""
    chars: list[tuple[str, int]] = []
    for i, (no, text) in enumerate(pieces):
        if i:
            chars.append((" ", no))
        chars.extend((c, no) for c in text)
    s = "".join(c for c, _ in chars)
    tokens: list[Token] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r\n":
            if c == "\n":
                tokens.append(Token(";", chars[i][1], "op"))
            i += 1
            continue
        if s.startswith(("&&", "||"), i):
            tokens.append(Token(s[i:i + 2], chars[i][1], "op"))
            i += 2
            continue
        if c in ";|&()":
            tokens.append(Token(c, chars[i][1], "op"))
            i += 1
            continue
        m = _REDIR.match(s, i)
        if m:
            tokens.append(Token(m.group(0), chars[i][1], "redir"))
            i = m.end()
            continue
        if c == "#":  # a comment runs to the end of the text
            break
        start, word = i, []
        while i < n and s[i] not in " \t\r\n;|&()<>":
            ch = s[i]
            if ch == "\\" and i + 1 < n:
                word.append(s[i + 1])
                i += 2
            elif ch == "'":
                j = s.find("'", i + 1)
                j = n if j < 0 else j
                word.append(s[i + 1:j])
                i = j + 1
            elif ch == '"':
                j = i + 1
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                word.append(s[i + 1:j].replace('\\"', '"'))
                i = j + 1
            elif s.startswith("$(", i) or ch == "`":
                close, j, level = (")", i + 2, 1) if ch == "$" else ("`", i + 1, 1)
                while j < n and level:
                    if close == ")" and s[j] == "(":
                        level += 1
                    elif s[j] == close:
                        level -= 1
                    j += 1
                word.append(s[i:j])
                i = j
            else:
                word.append(ch)
                i += 1
        tokens.append(Token("".join(word), chars[start][1]))
    return tokens


def simple_commands(tokens: list[Token]) -> Iterator[list[Token]]:
    """Words of each simple command, redirections and their targets dropped."""
    cmd: list[Token] = []
    skip_next = False
    for tok in tokens:
        if tok.kind == "op":
            if cmd:
                yield cmd
            cmd, skip_next = [], False
        elif tok.kind == "redir":
            skip_next = not re.search(r"&(\d+-?|-)$", tok.text)  # `2>&1` has no target
        elif skip_next:
            skip_next = False
        else:
            cmd.append(tok)
    if cmd:
        yield cmd


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = {"sudo", "env", "exec", "command", "time", "nice", "nohup", "eatmydata"}


def _strip_prefix(cmd: list[Token]) -> list[Token]:
    i = 0
    while i < len(cmd):
        word = cmd[i].text
        wrapper_option = word.startswith("-") and i and cmd[i - 1].text in ("sudo", "env", "nice")
        if _ASSIGN.match(word) or word in _WRAPPERS or wrapper_option:
            i += 1
        else:
            break
    return cmd[i:]


def _expand(word: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:  # ${NAME:-default} / ${NAME-default}
            return m.group(2)
        return m.group(0)
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                  sub, word)


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


@dataclass
class _Context:
    """What a Dockerfile's build can see: root, and the visible top-level names (None: all)."""
    root: Path
    visible: tuple[str, ...] | None
    blobs: tuple[str, ...] = ()
    base: str | None = None          # the task's [environment] base
    is_task: bool = False


@dataclass
class _DockerfileReport:
    findings: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # ADD/COPY sources, context-relative


def check_dockerfile(path: Path, ctx: _Context) -> _DockerfileReport:
    report = _DockerfileReport()
    add = report.findings.append
    try:
        instructions = parse_dockerfile(path.read_text(errors="replace"))
    except OSError as exc:
        add(Finding(path, None, "definition", f"cannot read: {exc}"))
        return report
    variables: dict[str, str] = {}
    global_args: dict[str, str | None] = {}
    stages: set[str] = set()
    seen_from = False
    uses_base = False
    first_from: int | None = None
    for ins in instructions:
        kw = ins.keyword
        if kw in ("ARG", "ENV"):
            for name, value in _declarations(ins.text, kw):
                if kw == "ARG" and not seen_from:
                    global_args[name] = value
                if value is not None:
                    variables[name] = value
        elif kw == "FROM":
            first_from = first_from or ins.line
            seen_from = True
            uses_base |= _check_from(path, ins, global_args, stages, ctx, add)
        elif kw == "RUN":
            _check_run(path, ins, variables, ctx, add)
        elif kw in ("ADD", "COPY"):
            report.sources += _check_copy(path, ins, ctx, add)
    if ctx.is_task and ctx.base and not uses_base:
        add(Finding(path, first_from, "base-image",
                    f"the task builds on base {ctx.base!r}, but this Dockerfile does not start "
                    f"with ARG {BASE_ARG} / FROM ${{{BASE_ARG}}}"))
    return report


def _declarations(text: str, kw: str) -> Iterator[tuple[str, str | None]]:
    words = [t.text for t in tokenize_shell([(0, text)]) if t.kind == "word"]
    if kw == "ENV" and len(words) >= 2 and "=" not in words[0]:
        yield words[0], " ".join(words[1:])  # legacy `ENV NAME value`
        return
    for word in words:
        name, eq, value = word.partition("=")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            yield name, value if eq else None


def _check_from(path: Path, ins: Instruction, global_args: dict[str, str | None],
                stages: set[str], ctx: _Context, add) -> bool:
    words = [w for w in ins.text.split() if not w.startswith("--")]
    if not words:
        return False
    image = words[0]
    if len(words) >= 3 and words[1].lower() == "as":
        stages.add(words[2].lower())
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
    resolved = _expand(image, known)
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


def _run_script(ins: Instruction) -> list[tuple[int, str]]:
    text = ins.text.strip()
    if text.startswith("["):
        try:
            argv = json.loads(text)
        except ValueError:
            argv = None
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            if len(argv) >= 3 and PurePosixPath(argv[0]).name in ("sh", "bash") \
                    and argv[1] == "-c":
                return [(ins.line, argv[2])]
            return [(ins.line, " ".join(_shell_quote(a) for a in argv))]
    return _strip_run_flags(ins.pieces)


def _strip_run_flags(pieces: list[tuple[int, str]]) -> list[tuple[int, str]]:
    if not pieces:
        return pieces
    no, first = pieces[0]
    first = re.sub(r"^\s*(--[a-z-]+=\S+\s+)+", "", first)  # RUN --mount=... (BuildKit)
    return [(no, first), *pieces[1:]]


def _shell_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'" if re.search(r"[\s'\"$;&|<>]", word) else word


def _check_run(path: Path, ins: Instruction, variables: dict[str, str], ctx: _Context,
               add) -> None:
    for cmd in simple_commands(tokenize_shell(_run_script(ins))):
        cmd = _strip_prefix(cmd)
        apt = _apt_args(cmd)
        if apt is not None:
            for tok, opt in _operands(apt, _APT_ARG_OPTS):
                if opt is not None:
                    continue
                pkg = _expand(tok.text, variables)
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
            value = _expand(tok.text, variables)
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


def _check_requirements(dockerfile: Path, line: int, name: str, ctx: _Context, add) -> None:
    """Check a `pip install -r FILE` whose file can be found in the build context."""
    if "$" in name:
        return
    base = PurePosixPath(name).name
    candidates = [p for p in _context_files(ctx) if p.name == base]
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


def _context_files(ctx: _Context) -> Iterator[Path]:
    tops = [ctx.root / v for v in ctx.visible] if ctx.visible is not None else [ctx.root]
    for top in tops:
        if top.is_file():
            yield top
        elif top.is_dir():
            yield from (p for p in _walk(top) if p.is_file())


def _check_copy(path: Path, ins: Instruction, ctx: _Context, add) -> list[str]:
    text = ins.text.strip()
    if re.search(r"(^|\s)--from(=|\s)", text):
        return []
    words: list[str]
    if text.startswith("["):
        try:
            words = json.loads(text)
        except ValueError:
            return []
    else:
        words = [w for w in text.split() if not w.startswith("--")]
    if len(words) < 2:
        return []
    sources = []
    for src in words[:-1]:
        if re.match(r"^[a-z][a-z0-9+.-]*://", src):
            if ins.keyword == "ADD":
                add(Finding(path, ins.line, "add-url",
                            f"ADD {src}: a download at build time is not pinned; put the data "
                            "in git or in a blob", "warning"))
            continue
        rel = PurePosixPath(src.lstrip("/"))
        norm = PurePosixPath(*[p for p in rel.parts if p != "."]) if rel.parts else rel
        sources.append(str(norm))
        if "$" in src or not norm.parts:
            continue
        top = norm.parts[0]
        if ctx.visible is not None and top != ".." and not _has_glob(top) \
                and top not in ctx.visible:
            seen = " and ".join(f"{v}/" for v in ctx.visible)
            add(Finding(path, ins.line, "build-context",
                        f"{ins.keyword} {src}: this build sees only {seen} of the task "
                        "directory"))
            continue
        if ".." in norm.parts:
            add(Finding(path, ins.line, "build-context",
                        f"{ins.keyword} {src}: a path outside the build context"))
            continue
        if _has_glob(str(norm)):
            if not list(ctx.root.glob(str(norm))):
                add(Finding(path, ins.line, "build-context",
                            f"{ins.keyword} {src}: matches nothing in the build context"))
            continue
        declared_blob = any(str(norm) == b or b.startswith(f"{norm}/") for b in ctx.blobs)
        if not (ctx.root / norm).exists() and not declared_blob:
            add(Finding(path, ins.line, "build-context",
                        f"{ins.keyword} {src}: no such file in the build context"))
    return sources


def _has_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


# ------------------------------------------------------------------------------- files

def _walk(top: Path) -> Iterator[Path]:
    for p in sorted(top.iterdir()):
        if p.is_dir() and not p.is_symlink():
            if p.name not in SKIP_DIRS:
                yield p
                yield from _walk(p)
        else:
            yield p


def _is_dockerfile(p: Path) -> bool:
    return p.is_file() and (p.name == "Dockerfile" or p.name.startswith("Dockerfile.")
                            or p.name.endswith(".Dockerfile"))


class _Git:
    """`git check-ignore` for the benchmark's work tree; inert outside one."""

    def __init__(self, root: Path):
        self.top: Path | None = None
        if shutil.which("git") is None:
            return
        proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                              capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            self.top = Path(proc.stdout.strip())

    def ignored(self, paths: list[Path]) -> set[Path]:
        if self.top is None or not paths:
            return set()
        absolute = {str(p.resolve()): p for p in paths}
        proc = subprocess.run(["git", "-C", str(self.top), "check-ignore", "--stdin", "-z"],
                              input="\0".join(absolute) + "\0", capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            return set()
        return {absolute[x] for x in proc.stdout.split("\0") if x in absolute}


# ------------------------------------------------------------------------------- tasks

def _read_task_toml(task_dir: Path) -> tuple[dict[str, Any] | None, dict[str, int]]:
    path = task_dir / "task.toml"
    try:
        text = path.read_text()
        return tomllib.loads(text), toml_lines(text)
    except (OSError, tomllib.TOMLDecodeError):
        return None, {}


def _check_metadata(task_dir: Path, data: dict[str, Any], lines: dict[str, int],
                    add) -> None:
    toml = task_dir / "task.toml"
    status = data.get("status")
    if status is None:
        add(Finding(toml, None, "status-missing",
                    f"no status; set one of: {', '.join(STATUSES)}"))
    elif status not in STATUSES:
        add(Finding(toml, lines.get("status"), "status-unknown",
                    f"status {status!r} is not one of: {', '.join(STATUSES)}"))
    category = data.get("category")
    if category is None:
        add(Finding(toml, None, "category-missing", "no category (e.g. \"optimization\", "
                    "\"coding\", \"systems\"): the leaderboard groups tasks by it"))
    elif not isinstance(category, str) or not category.strip():
        add(Finding(toml, lines.get("category"), "category-missing",
                    f"category must be a non-empty string, got {category!r}"))
    version = data.get("version")
    if version is None:
        add(Finding(toml, None, "version-missing",
                    "no version; start at \"1.0.0\" and bump it on any change that can move "
                    "scores"))
    elif not isinstance(version, str) or not VERSION.match(version):
        add(Finding(toml, lines.get("version"), "version-format",
                    f"version {version!r} is not MAJOR.MINOR.PATCH"))
    if not (task_dir / "instruction.md").is_file():
        add(Finding(task_dir / "instruction.md", None, "instruction-missing",
                    "missing: the prompt given to the agent"))
    notes = task_dir / "NOTES.md"
    if not notes.is_file():
        add(Finding(notes, None, "notes-missing",
                    "missing: every task documents what it measures, its grading, data and "
                    "reference results"))
        return
    headings = [(no, m.group(1).strip().lower())
                for no, raw in enumerate(notes.read_text(errors="replace").splitlines(), 1)
                if (m := re.match(r"^##\s+(.+?)\s*#*\s*$", raw))]
    found = {h: no for no, h in reversed(headings)}
    missing = [s for s in NOTES_SECTIONS if s.lower() not in found]
    if missing:
        add(Finding(notes, None, "notes-section",
                    "missing section(s): " + ", ".join(f"'## {s}'" for s in missing)))
        return
    order = [found[s.lower()] for s in NOTES_SECTIONS]
    for i in range(1, len(order)):
        name, no, prev = NOTES_SECTIONS[i], order[i], order[i - 1]
        if no < prev:
            add(Finding(notes, no, "notes-section",
                        f"'## {name}' is out of order; sections go: "
                        + ", ".join(NOTES_SECTIONS)))
            break


def _blob_decls(data: dict[str, Any] | None, lines: dict[str, int]
                ) -> list[tuple[str, int | None]]:
    out = []
    for i, blob in enumerate((data or {}).get("blobs", []) or []):
        if isinstance(blob, dict) and isinstance(blob.get("path"), str):
            rel = PurePosixPath(blob["path"])
            if not rel.is_absolute() and ".." not in rel.parts:
                out.append((str(rel), lines.get(f"blobs[{i}].path", lines.get(f"blobs[{i}]"))))
    return out


def _check_task(task_dir: Path, git: _Git, add) -> None:
    data, lines = _read_task_toml(task_dir)
    if data is not None:
        _check_metadata(task_dir, data, lines, add)
    blobs = _blob_decls(data, lines)
    blob_paths = {b for b, _ in blobs}
    base = ((data or {}).get("environment") or {}).get("base")
    base = base if isinstance(base, str) else None

    # Dockerfiles, each against the part of the task directory its build can see.
    sources: list[str] = []
    for sub, visible in (("environment", ("environment",)), ("judge", ("environment", "judge"))):
        folder = task_dir / sub
        if not folder.is_dir():
            continue
        for dockerfile in (p for p in _walk(folder) if _is_dockerfile(p)):
            ctx = _Context(task_dir, visible, tuple(blob_paths), base, is_task=True)
            report = check_dockerfile(dockerfile, ctx)
            for f in report.findings:
                add(f)
            sources += report.sources

    # Sizes and blobs: what is in git, what is ignored, what is declared.
    files = [p for p in _walk(task_dir) if p.is_file()]
    decl_files = [task_dir / b for b, _ in blobs]
    ignored = git.ignored(files + decl_files)
    total = 0
    for p in files:
        rel = p.relative_to(task_dir).as_posix()
        if rel in blob_paths:
            continue
        size = p.stat().st_size
        if p in ignored:
            if size > MAX_FILE_BYTES:
                add(Finding(p, None, "file-too-large",
                            f"{size} bytes, gitignored but not a declared blob: nobody else "
                            "can build this task; declare it in [[blobs]]"))
            continue
        total += size
        if size > MAX_FILE_BYTES:
            add(Finding(p, None, "file-too-large",
                        f"{size} bytes, over the {MAX_FILE_BYTES} byte cap for a file in git; "
                        "make it a blob"))
    if total > MAX_TASK_BYTES:
        add(Finding(task_dir, None, "task-too-large",
                    f"{total} bytes in git, over the {MAX_TASK_BYTES} byte cap per task; move "
                    "data into blobs"))
    for rel, line in blobs:
        if git.top is not None and (task_dir / rel) not in ignored:
            add(Finding(task_dir / "task.toml", line, "blob-not-ignored",
                        f"blob {rel} is not gitignored: it would be committed; add its "
                        "directory to .gitignore"))
        used = any(rel == s or rel.startswith(f"{s}/") or s in ("", ".")
                   or (_has_glob(s) and PurePosixPath(rel).match(s)) for s in sources)
        if not used:
            add(Finding(task_dir / "task.toml", line, "blob-unused",
                        f"blob {rel} is not ADDed or COPYd by any Dockerfile", "warning"))


# ------------------------------------------------------------------------------ entry

def _definition_finding(exc: Exception, root: Path) -> Finding:
    if isinstance(exc, DefinitionError):
        return Finding(exc.path, _locate(exc.path, exc.field), "definition",
                       (f"[{exc.field}] " if exc.field else "") + exc.message)
    return Finding(root, None, "definition", str(exc))


def check_benchmark(root: Path) -> list[Finding]:
    """Every rule violation in the benchmark at `root`, sorted by file and line."""
    root = Path(root)
    findings: list[Finding] = []
    add = findings.append
    try:
        bench = load_benchmark(root)
    except DefinitionError as exc:
        return [_definition_finding(exc, root)]
    for exc in bench.errors:
        add(_definition_finding(exc, root))
    git = _Git(root)
    bases = root / "bases"
    if bases.is_dir():
        for dockerfile in (p for p in _walk(bases) if _is_dockerfile(p)):
            ctx = _Context(dockerfile.parent, None)
            findings += check_dockerfile(dockerfile, ctx).findings
    tasks = root / "tasks"
    for task_dir in sorted(tasks.iterdir()):
        if task_dir.is_dir() and not task_dir.name.startswith("."):
            _check_task(task_dir, git, add)
    unique = sorted(set(findings), key=lambda f: (str(f.file), f.line or 0, f.rule, f.message))
    return unique
