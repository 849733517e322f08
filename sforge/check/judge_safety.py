"""Warnings for judges that may run submitted code as root by accident.

The judge runs as root in its container and the submission is extracted into cwd before
`[judge] cmd` starts, so whatever the cmd resolves from cwd, and whatever grader file or
PATH directory the submission paths overlay, the submission can replace. The safe pattern
(SCHEMA.md): the grader lives outside cwd and is started by absolute path, and the submitted
code runs as an unprivileged user with its own limits.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path, PurePosixPath

from sforge.benchmark.dockerfile import (
    copy_args,
    parse_dockerfile,
    simple_commands,
    strip_prefix,
    tokenize_shell,
)
from sforge.benchmark.model import Task
from sforge.check.findings import Finding
from sforge.check.toml_positions import locate
from sforge.grading.judge_container import DEFAULT_PATH
from sforge.grading.selection import Selection

_PYTHON = re.compile(r"^python[0-9.]*$")
_INTERPRETERS = re.compile(r"^(python[0-9.]*|sh|bash|dash|zsh|ksh|node|nodejs|perl|ruby|php"
                           r"|Rscript|julia|lua[0-9.]*)$")
# Programs that read their instructions from cwd by default (a Makefile, conftest.py, …).
_READS_CWD = {"make": "a Makefile", "pytest": "conftest.py and test files",
              "py.test": "conftest.py and test files", "npm": "package.json",
              "yarn": "package.json", "pnpm": "package.json", "cargo": "Cargo.toml",
              "go": "go.mod", "mvn": "pom.xml", "gradle": "build.gradle", "tox": "tox.ini"}


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path else "/"


def _overlap(a: str, b: str) -> bool:
    """One path is the other or lies under it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _cmd_risks(cmd: str) -> list[str]:
    out = []
    for words in simple_commands(tokenize_shell([(1, cmd)])):
        words = strip_prefix(words)
        if not words:
            continue
        prog = words[0].text
        name = PurePosixPath(prog).name
        if "$" in prog:
            continue
        if "/" in prog and not prog.startswith("/"):
            out.append(f"runs {prog!r}, a path relative to cwd, where the submission is "
                       "extracted")
            continue
        if _PYTHON.match(name):
            flags = [w.text for w in words[1:] if re.fullmatch(r"-[A-Za-z]+", w.text)]
            if any(f[-1] in "mc" for f in flags):  # -m, -c, -Im, -Bc, …
                out.append(f"{prog} -m/-c puts cwd first on sys.path: a submitted module of "
                           "the same name as one it imports runs as root")
                continue
        if _INTERPRETERS.match(name):
            script = next((w.text for w in words[1:] if not w.text.startswith("-")), None)
            if script and not script.startswith("/") and "$" not in script:
                out.append(f"{prog} runs {script!r} from cwd, where the submission is extracted")
            continue
        if name in _READS_CWD:
            out.append(f"{prog} reads {_READS_CWD[name]} from cwd, where the submission is "
                       "extracted")
    return out


def _cmd_files(cmd: str) -> list[str]:
    """Absolute programs and scripts the cmd runs: the grader's own files."""
    files = []
    for words in simple_commands(tokenize_shell([(1, cmd)])):
        for w in strip_prefix(words)[:2]:
            if w.text.startswith("/") and "$" not in w.text:
                files.append(_norm(w.text))
    return files


def _grader_copies(task: Task) -> list[tuple[str, int, Path]]:
    """Where the judge Dockerfile puts files from judge/ (absolute destinations)."""
    dockerfile = task.dir / "judge" / "Dockerfile"
    try:
        instructions = parse_dockerfile(dockerfile.read_text(errors="replace"))
    except OSError:
        return []
    workdir = "/"
    out = []
    for ins in instructions:
        if ins.keyword == "WORKDIR":
            workdir = posixpath.join(workdir, ins.text.strip())
        elif ins.keyword in ("COPY", "ADD"):
            args = copy_args(ins)
            if args is None or any(f.startswith("--from") for f in args.flags):
                continue
            tops = {next((p for p in s.split("/") if p not in ("", ".")), "")
                    for s in args.sources}
            if "judge" in tops and "$" not in args.dest:
                out.append((_norm(posixpath.join(workdir, args.dest)), ins.line, dockerfile))
    return out


def judge_risks(task: Task) -> list[Finding]:
    """Warnings for `task`'s judge: cmd resolving code from cwd, submission paths overlaying
    the grader's files or PATH directories (cwd "/" with broad paths among them)."""
    toml = task.dir / "task.toml"
    out: list[Finding] = []
    cmd_line = locate(toml, "judge.cmd")
    for risk in _cmd_risks(task.judge.cmd):
        out.append(Finding(toml, cmd_line, "judge-runs-cwd",
                           f"[judge] cmd {risk}; start the grader by absolute path from a "
                           "directory outside cwd, and run submitted code as an unprivileged "
                           "user", "warning"))
    cwd = _norm(task.environment.cwd)
    paths_line = locate(toml, "submission.paths") or locate(toml, "environment.cwd")
    grader = [(f, f"the grader's {f} (run by [judge] cmd)") for f in _cmd_files(
        task.judge.cmd)]
    grader += [(dest, f"{dest}, copied from judge/ at judge/{dockerfile.name}:{line}")
               for dest, line, dockerfile in _grader_copies(task)]
    # a file in cwd that [submission] exclude keeps out of every archive cannot be replaced:
    # not by its name, and not through its folder (extraction never puts a link or a file
    # over a folder of the image)
    selection = Selection(task.submission)
    grader = [(where, what) for where, what in grader
              if not (where.startswith(cwd.rstrip("/") + "/")
                      and selection.reason(posixpath.relpath(where, cwd)))]
    for raw in task.submission.paths:
        full = _norm(posixpath.join(cwd, raw.strip()))
        on_path = [d for d in DEFAULT_PATH if _overlap(full, d)]
        hits = [f"PATH directories {', '.join(on_path)}"] if on_path else []
        hits += [what for where, what in grader if _overlap(full, where)]
        if hits:
            where = "cwd \"/\" with " if cwd == "/" else ""
            out.append(Finding(toml, paths_line, "judge-overlay",
                               f"{where}submission path {raw!r} ({full}) overlays "
                               f"{'; '.join(hits[:3])}: a submission can replace what the "
                               "judge runs as root", "warning"))
    return out
