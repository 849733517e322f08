"""Write the sforge task of a Draft that fits; report every task either way."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from sforge.core.clock import now_iso
from sforge.core.errors import SforgeError
from sforge.core.fileio import read_utf8
from sforge.importers import harbor, terminal_bench
from sforge.importers.draft import (
    Draft,
    analyse,
    dockerfile_from,
    dockerfile_workdir,
    rewrite_copy_sources,
    split_installs,
    task_id_for,
)

READERS = {"harbor": harbor, "terminal-bench": terminal_bench}
GRADER_PATH = "/opt/sforge-import/grade.sh"


@dataclass
class ImportReport:
    """What happened to one source task."""
    source: Path
    task_id: str
    fmt: str
    fits: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: Path | None = None
    reference: str | None = None  # the reference archive, once made
    reference_problem: str | None = None

    def to_dict(self) -> dict:
        """The report as JSON data (what `sforge import --json` prints)."""
        return {"source": str(self.source), "task": self.task_id, "format": self.fmt,
                "fits": self.fits, "problems": self.problems, "notes": self.notes,
                "written": str(self.written) if self.written else None,
                "reference": self.reference, "reference_problem": self.reference_problem}


def source_tasks(fmt: str, sources: list[Path]) -> list[Path]:
    """Each SRC is a task directory, or a directory of task directories."""
    reader = READERS[fmt]
    out: list[Path] = []
    for src in sources:
        src = Path(src).resolve()
        if not src.is_dir():
            raise SforgeError(f"{src}: not a directory")
        if reader.is_task(src):
            out.append(src)
            continue
        found = [d for d in sorted(src.iterdir()) if d.is_dir() and reader.is_task(d)]
        if not found:
            marker = "task.toml and instruction.md" if fmt == "harbor" else "task.yaml"
            raise SforgeError(f"{src}: no {fmt} task here (a task directory holds {marker}), "
                              "nor in its subdirectories")
        out += found
    return out


def _git_commit(path: Path) -> dict[str, str]:
    """The source's commit, when it lives in a git work tree (provenance)."""
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    if head.returncode != 0:
        return {}
    out = {"commit": head.stdout.strip()}
    if dirty.stdout.strip():
        out["dirty"] = "yes"
    return out


def ensure_benchmark(into: Path) -> None:
    """Make `into` a benchmark (benchmark.toml, tasks/) unless it is one already."""
    toml = into / "benchmark.toml"
    if toml.is_file():
        return
    into.mkdir(parents=True, exist_ok=True)
    toml.write_text(tomli_w.dumps({"name": task_id_for(into.resolve().name)}))
    (into / "tasks").mkdir(exist_ok=True)


def _base_from(into: Path, base: str) -> str | None:
    dockerfile = into / "bases" / base / "Dockerfile"
    return dockerfile_from(read_utf8(dockerfile)) if dockerfile.is_file() else None


def import_tasks(fmt: str, sources: list[Path], into: Path, base: str | None = None,
                 force: bool = False) -> list[ImportReport]:
    """Convert every task under `sources` into `into`/tasks/; nothing is written for a task
    that does not fit. An existing task directory is replaced only with `force`."""
    if fmt not in READERS:
        raise SforgeError(f"unknown format {fmt!r} (harbor or terminal-bench)")
    tasks = source_tasks(fmt, sources)
    ensure_benchmark(into)
    reports = []
    for src in tasks:
        draft = READERS[fmt].read(src)
        reports.append(convert(draft, into, base, force))
    return reports


def convert(draft: Draft, into: Path, base: str | None, force: bool) -> ImportReport:
    """Write the sforge task of `draft` when it fits; → its report either way."""
    report = ImportReport(draft.source, draft.task_id, draft.fmt, fits=False,
                          problems=draft.problems, notes=draft.notes)
    workdir = dockerfile_workdir(draft.dockerfile)
    if draft.workdir:
        draft.cwd = draft.workdir
        draft.notes.append(f"cwd = {draft.workdir}, from [environment] workdir")
    elif workdir is None or workdir == "/":
        if draft.dockerfile:
            draft.problems.append("the Dockerfile sets no WORKDIR: there is no working "
                                  "directory for the answer to live in")
    else:
        draft.cwd = workdir
        draft.notes.append(f"cwd = {workdir}, from the Dockerfile's WORKDIR")
    moved, kept, stuck = split_installs(draft.test_script)
    for cmd in stuck:
        draft.problems.append(f"test-time install cannot move into the judge build "
                              f"(inside a block, or reads the submission): {cmd!r}")
    paths = analyse(draft, "\n".join(kept)) if draft.cwd != "/" else ["."]
    target = into / "tasks" / draft.task_id
    if target.exists() and not force:
        draft.problems.append(f"{target} exists (use --force to replace it)")
    if draft.problems:
        return report
    if target.exists():
        shutil.rmtree(target)
    try:
        _write(draft, target, into, base, moved, kept, paths)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)  # never a half-converted task
        raise
    report.fits, report.written = True, target
    return report


def _copy(files: list[tuple[Path, str]], dest: Path) -> None:
    for src, rel in files:
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def _judge_dockerfile(draft: Draft, moved: list[str]) -> str:
    lines = ["# Written by sforge import: the work image plus the source's tests and a grader.",
             "ARG WORK_IMAGE", "FROM ${WORK_IMAGE}"]
    for name, value in sorted(draft.env_vars.items()):
        lines.append(f"ENV {name}={json.dumps(value)}")
    run: list[str] = []  # consecutive commands share one RUN (apt-get update with install)
    for cmd in [*moved, None]:
        if cmd is None or (cmd.split()[0] in ("source", ".") and ".local/bin/env" in cmd):
            if run:
                lines.append(f"RUN cd {draft.cwd} && " + " \\\n    && ".join(run))
                run = []
            if cmd is not None:
                lines.append('ENV PATH="/root/.local/bin:${PATH}"')
            continue
        run.append(cmd)
    lines += ["COPY judge/tests/ /tests/", f"COPY judge/sforge-grade.sh {GRADER_PATH}",
              f"WORKDIR {draft.cwd}", ""]
    return "\n".join(lines)


def _write(draft: Draft, target: Path, into: Path, base: str | None, moved: list[str],
           kept: list[str], paths: list[str]) -> None:
    notes = draft.notes
    env_dir, judge_dir = target / "environment", target / "judge"
    env_dir.mkdir(parents=True)
    _copy(draft.env_files, env_dir)
    dockerfile, rewritten = rewrite_copy_sources(draft.dockerfile, "environment")
    if rewritten:
        notes.append(f"environment/Dockerfile: {rewritten} COPY/ADD source(s) prefixed with "
                     "environment/ (sforge's build context is the task directory)")
    base_name = None
    if base:
        mine, theirs = dockerfile_from(dockerfile), _base_from(into, base)
        if theirs is None:
            (into / "bases" / base).mkdir(parents=True, exist_ok=True)
            (into / "bases" / base / "Dockerfile").write_text(f"FROM {mine}\n")
            theirs = mine
            notes.append(f"bases/{base}/Dockerfile written: FROM {mine}")
        if mine == theirs:
            dockerfile = dockerfile.replace(f"FROM {mine}", "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}",
                                            1)
            base_name = base
            notes.append(f"environment/Dockerfile: FROM {mine} -> FROM ${{BASE_IMAGE}} "
                         f"(base {base!r})")
        else:
            notes.append(f"--base {base}: not applied, this task starts FROM {mine}, the base "
                         f"FROM {theirs}")
    (env_dir / "Dockerfile").write_text(dockerfile)
    (target / "instruction.md").write_text(draft.instruction)
    # judge: the source's tests, its test script without the installs, the grader
    (judge_dir / "tests").mkdir(parents=True)
    _copy(draft.tests, judge_dir / "tests")
    script = "\n".join(kept) + "\n"
    (judge_dir / "tests" / draft.test_script_name).write_text(script)
    (judge_dir / "original").mkdir(parents=True)
    (judge_dir / "original" / draft.test_script_name).write_text(draft.test_script)
    grader = harbor.GRADER if draft.fmt == "harbor" else terminal_bench.GRADER
    (judge_dir / "sforge-grade.sh").write_text(grader)
    (judge_dir / "Dockerfile").write_text(_judge_dockerfile(draft, moved))
    notes.append(f"tests copied to judge/tests/ (in the image at /tests); the judge starts "
                 f"FROM ${{WORK_IMAGE}} and runs {draft.test_script_name} through "
                 f"{GRADER_PATH}, which writes /opt/sforge/result.json")
    if draft.fmt == "harbor":
        notes.append("score: the reward tests/test.sh writes to /logs/verifier/reward.txt "
                     "(reward.json: its 'reward' key, else the mean); rescaled linearly 0..1")
    else:
        notes.append("score: passed / found tests of pytest's short summary (-rA), with "
                     "Terminal-Bench's reading (xfail and skipped count as passed); one "
                     "detail per test; rescaled linearly 0..1")
    for cmd in moved:
        notes.append(f"test-time install moved into the judge build: {cmd!r}")
    if moved:
        notes.append(f"judge/tests/{draft.test_script_name} is the source's without those "
                     f"lines; the original is judge/original/{draft.test_script_name}")
    notes.append(f"[submission] paths = {paths}: " + (
        "the paths under cwd the tests read" if paths != ["."] else
        "everything in cwd (the tests name no narrower path under it)"))
    if draft.solution:
        _copy(draft.solution, target / "solution")
        notes.append("the source's solution copied to solution/ (sforge ignores it); the "
                     "reference archive is made by running it in the work image")
    # task.toml
    environment: dict = {"cwd": draft.cwd, "internet": True}
    if base_name:
        environment["base"] = base_name
    if draft.cpus:
        environment["cpus"] = float(draft.cpus)
    if draft.memory:
        environment["memory"] = draft.memory
    notes.append("[environment] internet = true: the source lets its agent reach the network; "
                 "the judge gets none")
    if draft.cpus or draft.memory:
        notes.append("cpus/memory from the source apply to the work container and the judge")
    imported: dict[str, Any] = {"format": draft.fmt, "source": str(draft.source),
                "imported_at": now_iso(),
                **_git_commit(draft.source)}
    if draft.agent_timeout_sec:
        imported["agent_timeout_sec"] = float(draft.agent_timeout_sec)
    meta = dict(draft.metadata)
    data: dict = {"id": draft.task_id, "name": draft.name, "version": "1.0.0",
                  "status": "draft"}
    data["category"] = str(meta.pop("category", None) or "imported")
    data.update({
        "environment": environment,
        "submission": {"paths": paths},
        "judge": {"cmd": f"sh {GRADER_PATH}", "timeout_sec": draft.timeout_sec},
        "score": {"direction": "maximize",
                  "rescale": {"kind": "linear", "lower": 0.0, "upper": 1.0}},
        "imported": {**imported, **({"metadata": _tomlable(meta)} if meta else {})},
    })
    notes.append(f"[judge] timeout_sec = {draft.timeout_sec:g}, the source's test timeout")
    (target / "task.toml").write_text(tomli_w.dumps(data))
    (target / "NOTES.md").write_text(_notes_md(draft))


def _tomlable(value):
    if isinstance(value, dict):
        return {str(k): _tomlable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_tomlable(v) for v in value if v is not None]
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _notes_md(draft: Draft) -> str:
    """NOTES.md in the sections `sforge check` expects, the changes listed in full."""
    grading = [n for n in draft.notes if n.startswith(("score:", "[judge]", "tests copied"))]
    lines = [f"# {draft.name}", "",
             f"Imported by `sforge import {draft.fmt}` from `{draft.source}`; status draft "
             "until someone has reviewed it.", "",
             "## What it measures", "", "See instruction.md (the source's instruction, "
             "unchanged).", "",
             "## Grading", "", *[f"- {n}" for n in grading], "",
             "## Data", "", "The source's tests and data, under judge/tests/.", "",
             "## Reference results", "",
             "The source's solution, run in the work image: "
             "submissions/reference/<task>/reference.tar.gz (expected: 100).", "",
             "## Known issues", "", "Every change from the source:", "",
             *[f"- {n}" for n in draft.notes]]
    return "\n".join(lines) + "\n"
