"""`sforge check --integrity`: prove, with each task's built images, that grading cannot be
fooled. Six checks, each a function: leaks into the work image (sforge.check.leaks), the no-op
submission scores the floor, the declared reference scores full marks (the same verdict on each
of `--repeat` runs), cheat probes (sforge.check.probes) are graded as the judge decides, never
at the probe's own score, the judge image's PATH holds no folder the submission writes, and no
link of the judge image in cwd leads a submitted file out of cwd (sforge.check.judge_links).
Every archive goes through the normal grading function (one eval key each, cached like any
eval); only the leak check runs after `sforge build`, as warnings: it needs no judge run.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from sforge.benchmark.images import ImageRef
from sforge.benchmark.model import Task
from sforge.benchmark.submissions import store_archive
from sforge.benchmark.verdicts import (
    above_floor,
    at_least,
    full_marks,
    oracle_skipped,
    rescaled,
)
from sforge.build.solution import make_reference
from sforge.check.findings import Finding
from sforge.check.image_files import exported
from sforge.check.judge_links import judge_link_findings
from sforge.check.leaks import Keep, leak_findings
from sforge.check.probes import FAKE_SCORE, Workspace, probes
from sforge.check.toml_positions import locate
from sforge.commands.execution import Execution, sweep
from sforge.commands.images import make_images
from sforge.commands.references import judge_repeatedly
from sforge.containers.docker import engine as shared_engine
from sforge.core.clock import now_iso
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.archive import filter_submission
from sforge.grading.contract import archive_limits
from sforge.grading.results import EvalResult
from sforge.grading.selection import Selection, under
from sforge.plan.pipeline import Pipeline
from sforge.workflow.targets import grade

SOURCE = "integrity"  # the experiments store's source: never on the leaderboard


@dataclass(frozen=True)
class Graded:
    """One archive's verdict, as the checks compare it."""
    valid: bool
    score: float | None
    why: str
    sha256: str
    archive: Path

    def says(self, task: Task) -> str:
        """The verdict in words: INVALID with its reason, or the score and its rescaled value."""
        if not self.valid:
            return f"INVALID ({self.why})" if self.why else "INVALID"
        scaled = rescaled(task, self.valid, self.score)
        return f"score {self.score:g}" + (f" (rescaled {scaled:.4g})" if scaled is not None
                                          else "")


def grade_archive(pipe: Pipeline, task: Task, data: IO[bytes]) -> Graded:
    """Store the archive read from `data` in the experiments store and grade it like any
    eval (its result cached under its eval key)."""
    sub = store_archive(pipe.layout.experiments, SOURCE, task.id, data, now_iso())
    result: EvalResult = grade(pipe, pipe.eval_target(task.id, sub.sha256, sub.path))
    return Graded(result.valid, result.score if result.valid else None,
                  result.reason or result.summary, sub.sha256, sub.path)


def check_leaks(pipe: Pipeline, task: Task, keep: Keep | None = None) -> list[Finding]:
    """Check 1: nothing of judge/, solution/, a later .git or the canary in the work image
    (`keep`: sforge.check.leaks.leak_findings)."""
    return leak_findings(shared_engine(), task, pipe.refs[task.id]["work"].tag,
                         pipe.bench.canary, pipe.bench.root / "benchmark.toml", keep)


def path_findings(task: Task, env: list[str] | None) -> list[Finding]:
    """The judge image's PATH (`env`: its configured environment) holds no folder a
    submission can write: a relative entry (looked up from wherever the grader is), or a
    folder in cwd that [submission] paths reach. Every command the grader starts by name is
    looked up there first."""
    dockerfile = task.dir / "judge" / "Dockerfile"
    cwd = posixpath.normpath(task.environment.cwd)
    value = next((v.partition("=")[2] for v in env or () if v.startswith("PATH=")), None)
    selection, out, seen = Selection(task.submission), [], set()
    for entry in value.split(":") if value is not None else ():
        full = posixpath.normpath(posixpath.join(cwd, entry))
        if full in seen or (entry.startswith("/") and not under(full, cwd)):
            continue
        seen.add(full)
        rel = posixpath.relpath(full, cwd)
        if entry.startswith("/") and not selection.reaches("" if rel == "." else rel,
                                                           direct=True):
            continue  # no submitted file ever lands there
        what = f"'{entry}', relative to cwd" if not entry.startswith("/") else entry
        out.append(Finding(dockerfile, None, "integrity-path",
                           f"the judge image's PATH holds {what}: a submitted "
                           f"{posixpath.join(rel, 'sh')} or {posixpath.join(rel, 'python')} "
                           "runs instead of the system's for every command the grader "
                           "starts by name; keep PATH to absolute folders outside cwd (or "
                           "outside [submission] paths)"))
    return out


def check_noop(pipe: Pipeline, task: Task, noop: IO[bytes],
               reference: Graded | None) -> list[Finding]:
    """Check 2: the workspace as shipped (what sforge-submit would pack from it), graded,
    scores no more than the task's floor; one the judge refuses whole (over the archive
    limits) proves nothing, and is an error."""
    got = grade_archive(pipe, task, noop)
    toml = task.toml_path
    if not got.valid and (refused := _refusal(pipe, task, got.archive)):
        return [Finding(toml, locate(toml, "submission.paths"), "integrity-noop",
                        "that the workspace as shipped pays nothing cannot be proven: the "
                        f"workspace as shipped is refused: {refused}; keep what [submission] "
                        "paths select in cwd within the archive limits (or leave the rest "
                        "out with exclude)")]
    pays = above_floor(task, got.valid, got.score)
    if pays is None and reference is not None:
        pays = at_least(task, got.score, reference.score)
    if pays:
        return [Finding(toml, locate(toml, "score"), "integrity-noop",
                        f"the workspace as shipped (the no-op submission) scores: "
                        f"{got.says(task)}; a task must pay nothing for doing nothing: "
                        "make the judge score the shipped stub at the floor, or set [score] "
                        "rescale so it maps to 0")]
    if pays is None:
        return [Finding(toml, locate(toml, "score"), "integrity-noop",
                        f"the no-op submission is valid ({got.says(task)}) and, minimized "
                        "without [score] rescale or a [reference], its floor is unknown; "
                        "add a rescale table", "warning")]
    return []


def _refusal(pipe: Pipeline, task: Task, archive: Path) -> str | None:
    """Why the judge refuses `archive` as a whole (the archive limits), or None."""
    with filter_submission(archive, task.submission, archive_limits(pipe.config),
                           task.environment.cwd) as out:
        return out.refused


def reference_archive(pipe: Pipeline, task: Task) -> bytes | None:
    """The bytes of the declared reference: its archive, or its script's output (made once
    per work image and script, kept under <results>/check/reference/)."""
    ref = task.reference
    if ref is None:
        return None
    if ref.archive:
        return (task.dir / ref.archive).read_bytes()
    assert ref.script is not None
    work = pipe.refs[task.id]["work"]
    folder = task.dir / Path(ref.script).parent
    files = [task.dir / ref.script] if folder == task.dir else folder.rglob("*")
    digest = hashlib.sha256(work.tag.encode())
    sub = task.submission  # what is packed of cwd
    digest.update(repr((sub.paths, sub.exclude)).encode() + b"\0")
    for path in sorted(p for p in files if p.is_file()):
        digest.update(str(path.relative_to(task.dir)).encode() + b"\0" + path.read_bytes())
    out = pipe.layout.reference_archive(task.id, f"{digest.hexdigest()[:16]}.tar.gz")
    if not out.is_file():
        make_reference(shared_engine(), work.tag, task, out, script=ref.script)
    return out.read_bytes()


def check_reference(pipe: Pipeline, task: Task, data: bytes,
                    repeat: int) -> tuple[Graded, list[Finding]]:
    """Check 3: the reference scores full marks; with `repeat` ≥ 2, the same each time."""
    got = grade_archive(pipe, task, io.BytesIO(data))
    toml = task.toml_path
    line = locate(toml, "reference")
    found = []
    if not full_marks(task, got.valid, got.score):
        found.append(Finding(toml, line, "integrity-reference",
                             f"the reference solution does not score full marks: "
                             f"{got.says(task)}; fix the judge (a broken oracle) or the "
                             "reference, or the rescale table's top anchor"))
    if repeat >= 2:
        out = judge_repeatedly(pipe, task, got.archive, got.sha256, repeat)
        if out.differ:
            seen = ", ".join(f"{'valid' if v else 'INVALID'} {s}" for v, s, _ in out.verdicts)
            found.append(Finding(toml, line, "nondeterministic-grader",
                                 f"{repeat} runs of the judge on the reference disagree: "
                                 f"{seen}"))
    return got, found


def check_probes(pipe: Pipeline, task: Task, dirs: set[str],
                 reference: Graded | None) -> list[Finding]:
    """Check 4: each cheat probe is graded as the judge decides, never at its own score."""
    toml = task.toml_path
    found = []
    if reference is not None and above_floor(task, reference.valid, reference.score) is False:
        reference = None  # a reference at the floor says nothing about what a probe got
    for probe in probes(task, dirs, archive_limits(pipe.config).max_bytes):
        got = grade_archive(pipe, task, io.BytesIO(probe.data))
        if not got.valid or got.score is None:
            continue
        fooled = (abs(got.score) >= FAKE_SCORE / 10 or bool(above_floor(task, True, got.score))
                  or (reference is not None and at_least(task, got.score, reference.score)))
        if fooled:
            found.append(Finding(toml, locate(toml, "judge.cmd"), "integrity-probe",
                                 f"probe {probe.name} ({probe.what}) was graded "
                                 f"{got.says(task)}: the judge can be fooled; start the "
                                 "grader by absolute path outside cwd, write result.json "
                                 "from the grader alone, and run submitted code as an "
                                 "unprivileged user (archive: "
                                 f"{got.archive})"))
    return found


def check_task(pipe: Pipeline, task: Task, repeat: int = 0) -> list[Finding]:
    """All six checks for one task whose images are built."""
    workspace = Workspace(task.environment.cwd, task.submission)
    found = check_leaks(pipe, task, workspace.take)  # one export: leaks and the no-op
    if workspace.pending:  # hard links in cwd to files not packed: their bytes, read again
        with exported(shared_engine(), pipe.refs[task.id]["work"].tag, task.id) as stream:
            workspace.resolve(stream)
    dirs = workspace.dirs
    reference: Graded | None = None
    try:
        data = reference_archive(pipe, task)
    except SforgeError as exc:
        found.append(Finding(task.toml_path, locate(task.toml_path, "reference"),
                             "integrity-reference", f"no reference archive: {exc}"))
        data = None
    if skipped := oracle_skipped(task):  # not checked is not proven: say so, as prove does
        found.append(Finding(task.toml_path, None, "integrity-reference", skipped, "warning"))
    if data is not None:
        reference, more = check_reference(pipe, task, data, repeat)
        found += more
    elif repeat >= 2 and task.reference is None:
        found.append(Finding(task.toml_path, None, "nondeterministic-grader",
                             "no [reference] to repeat", "warning"))
    with workspace.archive() as noop:
        found += check_noop(pipe, task, noop, reference)
    found += check_probes(pipe, task, dirs, reference)
    judge = pipe.refs[task.id]["judge"].tag
    found += path_findings(task, shared_engine().image_env(judge))
    found += judge_link_findings(shared_engine(), task, judge,
                                 pipe.layout.cache / "judge-links")
    return found


def check_integrity(pipe: Pipeline, ids: list[str] | None, ex: Execution,
                    repeat: int = 0) -> list[Finding]:
    """`sforge check --integrity`: every selected task's images made, then its checks."""
    tasks = pipe.tasks(ids)
    sweep()
    make_images(pipe, pipe.images([t.id for t in tasks]), ex, quiet=True)
    found: list[Finding] = []
    for task in tasks:
        refs = pipe.images([task.id])
        if not all(pipe.sentinel(r).exists() for r in refs):
            found.append(Finding(task.toml_path, None, "integrity-build",
                                 f"its images do not build (see: sforge build --task "
                                 f"{task.id}); not checked"))
            continue
        found += check_task(pipe, task, repeat)
    return found


def after_build(pipe: Pipeline, made: Iterable[ImageRef]) -> list[Finding]:
    """What `sforge build` runs on the work images it just made: the leak check alone (no
    judge run), every finding a warning."""
    found: list[Finding] = []
    for ref in made:
        task = pipe.bench.tasks.get(ref.name) if ref.kind == "work" else None
        if task is None or not pipe.sentinel(ref).exists():
            continue
        try:
            found += [replace(f, severity="warning") for f in check_leaks(pipe, task)]
        except InfrastructureError as exc:  # a warning pass never fails the build
            found.append(Finding(task.toml_path, None, "integrity-leak",
                                 f"work image not read for leaks: {exc}", "warning"))
    return found
