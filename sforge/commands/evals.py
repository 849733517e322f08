"""What `sforge eval`, `grade` and `report` do: store and grade one archive, grade every
submission that lacks a result (in process, or through Snakemake on a cluster) with a live
progress line, and make the tables and report.html."""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sforge.benchmark.rescaling import rescale
from sforge.benchmark.submissions import store_archive
from sforge.commands.execution import Execution, run_workflow
from sforge.commands.images import ensure_judge, make_images, prepare_images
from sforge.core.bulk import no_gc
from sforge.core.clock import now_iso
from sforge.core.console import JobProgress, Verdict, say
from sforge.core.errors import SforgeError
from sforge.evals.batch import describe_error, grade_batch
from sforge.evals.grade import grade
from sforge.grading.contract import judged_task
from sforge.grading.results import (
    EvalResult,
    load_result,
    regrading,
    set_aside,  # (sforge.scores imports pandas)
)
from sforge.plan.pipeline import EvalTarget, Pipeline
from sforge.report.update import stale_tasks, task_fingerprints, update_products
from sforge.scores.cache import RESULT_FIELDS, cache_path, read_results

if TYPE_CHECKING:
    from sforge.benchmark.submissions import Submission


def job_verdict(pipe: Pipeline, sources: dict[str, list[str]], rule: str,
                wildcards: dict[str, str]):  # -> console.Verdict | None
    """What a finished job did, in one line: a judge's task, source(s) and score or INVALID
    with its reason; an image's kind, name and tag."""
    failed = wildcards.get("failed") == "yes"
    if rule == "evaluate":
        task, key = wildcards.get("task", "?"), wildcards.get("key", "?")
        who = ",".join(sources.get(key, [])) or "?"
        if failed:
            return Verdict(f"{task}  {who}  FAILED: no result written (see the error above; "
                           "it is graded again on the next run)", False)
        try:
            result = EvalResult.read(pipe.layout.eval_result(task, key))
        except (OSError, ValueError, TypeError) as exc:
            return Verdict(f"{task}  {who}  result unreadable: {exc}", True)
        if result.valid:
            return Verdict(f"{task}  {who}  score {result.score:.6g}  {result.summary}".rstrip(),
                           False)
        why = result.reason or result.summary or "the grader said invalid"
        return Verdict(f"{task}  {who}  INVALID: {why}", True)
    if rule in ("base_image", "task_image"):
        kind = wildcards.get("kind", "base")
        name = wildcards.get("task") or wildcards.get("name", "?")
        state = "FAILED (see its build log)" if failed else "ready"
        return Verdict(f"image {kind} {name} ({wildcards.get('digest', '?')}) {state}", False)
    return None


def grading_progress(pipe: Pipeline, title: str, ex: Execution):  # -> console.JobProgress
    """The live display for a run that grades: done/total, rate, ETA, invalid, failed."""
    sources: dict[str, list[str]] = {}
    for sub, _ in pipe.records():
        key = pipe.eval_target(sub.task, sub.sha256, sub.path).key
        if sub.source not in sources.setdefault(key, []):
            sources[key].append(sub.source)
    return JobProgress(title, lambda rule, wc: job_verdict(pipe, sources, rule, wc),
                       verbose=ex.verbose >= 1)


def result_view(pipe: Pipeline, result, source: str) -> dict[str, Any]:
    """A result as `sforge eval --json` and the service show it: with source and rescaled score."""
    task = pipe.bench.tasks[result.task]
    data = result.to_dict()
    data["source"] = source
    data["rescaled"] = rescale(task.score.rescale, result.score) if result.valid else None
    data["direction"] = task.score.direction
    return data


@dataclass
class EvalOutcome:
    """One graded (or already graded) archive: its target, result and result file."""
    target: EvalTarget
    result: Any  # EvalResult
    path: Path
    already: bool = False
    notes: list[str] = field(default_factory=list)


def regrade(pipe: Pipeline, ids: list[str] | None) -> AbstractContextManager[int]:
    """For a block: the stored results of the tasks `ids` set aside into history/, so they
    are graded again (a grader that is not deterministic, an image rebuilt under the same
    tag); the tables then use the new verdicts. One that is not graded anew in the block
    (the daemon down, a judge that fails to start) is put back (see `regrading`)."""
    return regrading(sorted({p for _, p in pipe.records(ids)}) if ids else [])


def eval_archive(pipe: Pipeline, task_id: str, archive: str, source: str,
                 timeout: float | None, ex: Execution, stdin: IO[bytes] | None = None,
                 force: bool = False) -> EvalOutcome:
    """Store `archive` (a path, or - for `stdin`) and grade it with the task's judge; with
    `force`, grade it again although a result is stored (the old one goes to history/)."""
    task = pipe.bench.tasks.get(task_id)
    if task is None:
        raise SforgeError(f"unknown or broken task {task_id!r}")
    now = now_iso()
    task = judged_task(task, timeout)  # a bad override is refused before anything is stored
    # An override makes an experiment: its result is kept under its own key (the settings
    # are in it), but the archive stays out of the submissions the leaderboard grades,
    # which would grade it again under the task's own settings.
    experiment = timeout is not None
    store = pipe.layout.experiments if experiment else pipe.layout.store
    if experiment:
        say(f"--timeout {timeout:g} overrides [judge] timeout_sec: an experiment, graded "
            "under its own key; the archive is not added to the leaderboard's submissions")
    if archive == "-":
        sub = store_archive(store, source, task.id, stdin or sys.stdin.buffer, now)
    else:
        path = Path(archive)
        if not path.is_file():
            raise SforgeError(f"{path}: archive not found")
        with path.open("rb") as fh:  # its file name is kept for the report (shown_name)
            sub = store_archive(store, source, task.id, fh, now, {"filename": path.name})
    pipe.archive_hashes.note(sub.path, sub.sha256)  # hashed while stored: not read again to hash
    target = pipe.eval_target(task.id, sub.sha256, sub.path, task)
    out = pipe.eval_path(target)
    with regrading([out] if force else []):  # kept unless a new verdict replaces it
        stored = load_result(out)  # an unreadable one is set aside and graded again
        if stored is not None:
            return EvalOutcome(target, stored, out, already=True)
        ensure_judge(pipe, task.id, ex)
        return EvalOutcome(target, grade(pipe, target), out)


@dataclass
class GradeOutcome:
    """Counts of a grading pass: submissions, distinct results, missing, failed."""
    submissions: int
    distinct: int
    missing: int
    failed: int
    # The result fields read on the way (path → sforge.scores.cache fields), for the tables
    # made right after: they are not read or stat'ed again.
    read: dict[str, tuple[Any, ...]] = field(default_factory=dict, repr=False)


def read_stored_results(pipe: Pipeline, paths: list[str]) -> dict[str, tuple[Any, ...]]:
    """The results among `paths` that are there and readable (path → their fields). Those
    that exist but cannot be read are moved to history/ (with a warning), so they count as
    missing and are graded again. Parsed through the scores cache: a file unchanged since
    it was last parsed is only stat'ed."""
    if not paths:
        return {}
    return read_results(paths, cache_path(pipe.layout.scores), prune=False,
                        on_unreadable=lambda path, why: set_aside(Path(path), why))


def grade_pending(pipe: Pipeline, ids: list[str] | None, ex: Execution,
                  again: list[str] | None = None) -> GradeOutcome:
    """Grade what has no result (or an unreadable one); `again` names tasks whose results
    are graded anew."""
    with regrade(pipe, again):
        return grade_missing(pipe, ids, ex, "grade")


def make_report(pipe: Pipeline, ex: Execution, again: list[str] | None = None) -> bool:
    """Grade what is pending (and the tasks `again` anew), then make the tables and
    report.html; True when all made."""
    with regrade(pipe, again):
        # Only the tasks whose folders changed since the last report are looked at (their
        # fingerprints are taken before anything is read); only what is missing is graded.
        prints = task_fingerprints(pipe)
        stale = stale_tasks(pipe, prints)
        read: dict[str, tuple[Any, ...]] = {}
        if stale:
            out = grade_missing(pipe, stale, ex, "report")
            if out.failed:
                say(f"{out.failed} result(s) could not be graded; tables not updated")
                return False
            if out.missing:
                prints.update(task_fingerprints(pipe, stale))
            else:
                # What was read stands for the tables only where the task's fingerprint was
                # taken before it: a task fingerprinted again later (too fresh now) is read
                # again, or a change in between would be stored as seen.
                at = RESULT_FIELDS.index("task")
                later = {t for t, fp in prints.items() if fp is None}
                read = {p: f for p, f in out.read.items() if f[at] not in later}
        update_products(pipe, prints, read)
        return True


def grade_missing(pipe: Pipeline, ids: list[str] | None, ex: Execution,
                  title: str) -> GradeOutcome:
    """What `grade` and `report` both do (after setting aside the results to grade anew):
    set aside the results of the tasks `ids` that cannot be read, then grade every result
    file their submissions need and lack. Up-to-date results are only stat'ed; a
    `--profile` run grades through Snakemake (cluster jobs), a local one in process
    (sforge.evals.batch)."""
    with no_gc():
        rows = pipe.record_rows(ids)
        paths = sorted({r.result for r in rows})
        read = read_stored_results(pipe, paths)
        missing = [p for p in paths if p not in read]
    if missing:
        say(f"{len(missing)} of {len(paths)} result(s) to grade")
        wanted = set(missing)
        with grading_progress(pipe, title, ex) as progress:
            if ex.profile:
                prepare_images(pipe, ids)
                run_workflow(pipe.config, [Path(p) for p in missing], ex, progress=progress)
            else:
                grade_locally(pipe, [(r.submission(), Path(r.result)) for r in rows
                                     if r.result in wanted], {Path(p) for p in wanted},
                              ex, progress)
    still = [p for p in missing if not os.path.exists(p)]
    return GradeOutcome(len(rows), len(paths), len(missing), len(still), read)


def grade_locally(pipe: Pipeline, records: list[tuple[Submission, Path]], missing: set[Path],
                  ex: Execution, progress: Any) -> None:
    """Grade the result files `missing` of `records` on this machine: their judge images
    made first (recorded, or built), then the evals in process, `ex.jobs` cores at a time.
    Identical archives share a result file: the first by path is the one judged."""
    by_path: dict[Path, EvalTarget] = {}
    for sub, path in sorted(records, key=lambda r: str(r[0].path)):
        if path in missing and path not in by_path:
            by_path[path] = pipe.eval_target(sub.task, sub.sha256, sub.path)
    targets = [by_path[p] for p in sorted(by_path, key=os.fspath)]
    tasks = sorted({t.task for t in targets})
    make_images(pipe, pipe.images(tasks, kinds=("base", "judge")), ex)
    ready = {t for t in tasks if pipe.sentinel(pipe.refs[t]["judge"]).exists()}
    total = len(targets)
    done = 0

    def report(target: EvalTarget, error: BaseException | None) -> None:
        nonlocal done
        done += 1
        wildcards = {"task": target.task, "key": target.key}
        if error is None:
            progress.finished("evaluate", wildcards)
        else:
            progress.print(describe_error(target, error))
            progress.failed("evaluate", wildcards)
        progress.progress(done, total)

    progress.progress(0, total)
    for target in targets:
        if target.task not in ready:
            report(target, SforgeError(f"no judge image (see: sforge build --task "
                                       f"{target.task})"))
    grade_batch(pipe, [t for t in targets if t.task in ready], ex.jobs, report)
