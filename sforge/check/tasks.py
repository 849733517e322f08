"""Task rules: metadata, NOTES.md, sizes and blobs, each Dockerfile against its context;
and `check_benchmark`, the entry point."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sforge.benchmark.dockerfile import (
    BASE_ARG,
    declarations,
    heredoc_uses,
    judge_image_uses,
    parse_dockerfile,
)
from sforge.benchmark.house_rules import HouseRules
from sforge.benchmark.loader import load_benchmark, require_benchmark_dir
from sforge.benchmark.model import Task
from sforge.check.context import CheckContext, check_copy, has_glob, is_dockerfile, walk_files
from sforge.check.findings import Finding
from sforge.check.house_rules import check_house_rules
from sforge.check.judge_safety import judge_risks
from sforge.check.pinning import check_from, check_run
from sforge.check.toml_positions import locate, toml_lines
from sforge.core.errors import DefinitionError

MAX_FILE_BYTES = 1 << 20          # no single file over 1 MiB in git
MAX_TASK_BYTES = 5 << 20          # no task over 5 MiB in git

@dataclass
class _DockerfileReport:
    findings: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # ADD/COPY sources, context-relative


def check_dockerfile(path: Path, ctx: CheckContext) -> _DockerfileReport:
    """Every finding for one Dockerfile against what its build can see, with its sources."""
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
            for name, value in declarations(ins.text, kw):
                if kw == "ARG" and not seen_from:
                    global_args[name] = value
                if value is not None:
                    variables[name] = value
        elif kw == "FROM":
            first_from = first_from or ins.line
            seen_from = True
            uses_base |= check_from(path, ins, global_args, stages, ctx, add)
        elif kw == "RUN":
            check_run(path, ins, variables, ctx, add)
        elif kw in ("ADD", "COPY"):
            report.sources += check_copy(path, ins, ctx, add)
    if not ctx.is_task or ctx.visible == ("environment",):  # a base or work build
        for line, msg in judge_image_uses(path):
            add(Finding(path, line, "judge-image",
                        f"{msg}: a work or base build must never read a judge image (the "
                        "hidden grader and tests would leak)"))
    for line, msg in heredoc_uses(path):
        add(Finding(path, line, "heredoc", msg))
    if ctx.is_task and ctx.base and not uses_base:
        add(Finding(path, first_from, "base-image",
                    f"the task builds on base {ctx.base!r}, but this Dockerfile does not start "
                    f"with ARG {BASE_ARG} / FROM ${{{BASE_ARG}}}"))
    return report



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
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None, {}  # the loader's error is the finding (file, line, what is wrong)


def _check_instruction(task_dir: Path, add) -> None:
    if not (task_dir / "instruction.md").is_file():
        add(Finding(task_dir / "instruction.md", None, "instruction-missing",
                    "missing: the prompt given to the agent"))


def _blob_decls(data: dict[str, Any] | None, lines: dict[str, int]
                ) -> list[tuple[str, int | None]]:
    out = []
    for i, blob in enumerate((data or {}).get("blobs", []) or []):
        if isinstance(blob, dict) and isinstance(blob.get("path"), str):
            rel = PurePosixPath(blob["path"])
            if not rel.is_absolute() and ".." not in rel.parts:
                out.append((str(rel), lines.get(f"blobs[{i}].path", lines.get(f"blobs[{i}]"))))
    return out


def _check_task(task_dir: Path, rules: HouseRules, git: _Git, add) -> None:
    data, lines = _read_task_toml(task_dir)
    _check_instruction(task_dir, add)
    if data is not None:
        check_house_rules(rules, task_dir, data, lines, add)
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
        for dockerfile in (p for p in walk_files(folder) if is_dockerfile(p)):
            ctx = CheckContext(task_dir, visible, tuple(blob_paths), base, is_task=True)
            report = check_dockerfile(dockerfile, ctx)
            for f in report.findings:
                add(f)
            sources += report.sources

    # Sizes and blobs: what is in git, what is ignored, what is declared.
    files = [p for p in walk_files(task_dir) if p.is_file()]
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
                   or (has_glob(s) and PurePosixPath(rel).match(s)) for s in sources)
        if not used:
            add(Finding(task_dir / "task.toml", line, "blob-unused",
                        f"blob {rel} is not ADDed or COPYd by any Dockerfile", "warning"))


# ------------------------------------------------------------------------------ entry

def definition_finding(exc: Exception, root: Path) -> Finding:
    """A load error of the benchmark at `root` as a finding: its file, line and field when
    it names them (the one way `check`, and `eval` of a broken task, say it)."""
    if isinstance(exc, DefinitionError):
        line = exc.line if exc.line is not None else locate(exc.path, exc.field)
        return Finding(exc.path, line, "definition",
                       (f"[{exc.field}] " if exc.field else "") + exc.message)
    return Finding(root, None, "definition", str(exc))


def rescale_missing(task: Task) -> list[Finding]:
    """A task without `[score] rescale` is valid but has no 0–100 score: it counts 0 on the
    leaderboard whatever it scores (docs/write-a-task.md, "Rescale"), so say it loudly."""
    if task.score.rescale is not None:
        return []
    toml = task.dir / "task.toml"
    return [Finding(toml, locate(toml, "score"), "rescale-missing",
                    "no [score] rescale: every source counts 0 on the leaderboard for this "
                    "task, whatever it scores; add e.g. rescale = { kind = \"linear\", "
                    "lower = 0.0, upper = 1.0 } (docs/rescale.md)", "warning")]


def check_benchmark(root: Path, ids: list[str] | None = None) -> list[Finding]:
    """Every rule violation in the benchmark at `root`, sorted by file and line. A missing
    benchmark directory, or an id of `ids` that names no task, is an SforgeError as for
    every command, never an empty list of findings: what was not checked is not clean."""
    root = Path(root)
    findings: list[Finding] = []
    add = findings.append
    require_benchmark_dir(root)
    try:
        bench = load_benchmark(root)
    except DefinitionError as exc:
        return [definition_finding(exc, root)]
    bench.require(ids)
    for err in bench.errors:
        add(definition_finding(err, root))
    for task in bench.tasks.values():
        findings += judge_risks(task)
        findings += rescale_missing(task)
    git = _Git(root)
    bases = root / "bases"
    if bases.is_dir():
        for dockerfile in (p for p in walk_files(bases) if is_dockerfile(p)):
            ctx = CheckContext(dockerfile.parent, None)
            findings += check_dockerfile(dockerfile, ctx).findings
    tasks = root / "tasks"
    for task_dir in sorted(tasks.iterdir()):
        if task_dir.is_dir() and not task_dir.name.startswith("."):
            _check_task(task_dir, bench.house_rules, git, add)
    if ids:  # the named tasks' own findings, and the benchmark-wide ones
        chosen = [tasks / i for i in ids]
        findings = [f for f in findings if not Path(f.file).is_relative_to(tasks)
                    or any(Path(f.file).is_relative_to(d) for d in chosen)]
    unique = sorted(set(findings), key=lambda f: (str(f.file), f.line or 0, f.rule, f.message))
    return unique
