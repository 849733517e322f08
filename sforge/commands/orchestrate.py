"""What each CLI command does, as functions that return what happened: the CLI parses
arguments and prints, these decide and act.

Fast paths answer from the same targets the Snakefile declares (sentinels, result files)
without starting Snakemake when nothing needs making: its import alone costs ~1 s here.
Progress notes go to stderr through `say`; outcomes are returned.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sforge.benchmark.images import ImageRef
from sforge.core.bulk import no_gc
from sforge.core.clock import now_iso
from sforge.core.errors import SforgeError
from sforge.grading.contract import judged_task
from sforge.plan.pipeline import EvalTarget, Pipeline
from sforge.plan.planner import (
    Decision,
    GradePlan,
    Presence,
    docker_builds,
    drop_stale_sentinels,
    plan_grading,
    plan_images,
    presence,
    verify_sentinels,
)

if TYPE_CHECKING:
    from sforge.benchmark.submissions import Submission


def say(message: str) -> None:
    print(f"sforge: {message}", file=sys.stderr)


@dataclass(frozen=True)
class Execution:
    """How to run Snakemake when something must be made."""
    jobs: int = 1
    profile: str | None = None
    verbose: int = 0  # 1: a line per finished judge or image; 2: Snakemake's job log too


def run_workflow(config: dict[str, Any], targets: list, ex: Execution, *,
                 quiet: bool = False, progress: Any = None, force: bool = False,
                 push: bool = False) -> bool:
    """Make `targets` with Snakemake; this run's flags go in its own config (a Pipeline
    cached for an earlier run never carries them)."""
    from sforge.workflow.snakemake import Run, run

    config = dict(config, force=force, push=push)
    return run(Run(targets=[str(t) for t in targets], config=config, cores=ex.jobs or 1,
                   profile=ex.profile, quiet=quiet, verbose=ex.verbose, progress=progress))


def job_verdict(pipe: Pipeline, sources: dict[str, list[str]], rule: str,
                wildcards: dict[str, str]):  # -> console.Verdict | None
    """What a finished job did, in one line: a judge's task, source(s) and score or INVALID
    with its reason; an image's kind, name and tag."""
    from sforge.core.console import Verdict
    from sforge.grading.results import EvalResult

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
    from sforge.core.console import JobProgress

    sources: dict[str, list[str]] = {}
    for sub, _ in pipe.records():
        key = pipe.eval_target(sub.task, sub.sha256, sub.path).key
        if sub.source not in sources.setdefault(key, []):
            sources[key].append(sub.source)
    return JobProgress(title, lambda rule, wc: job_verdict(pipe, sources, rule, wc),
                       verbose=ex.verbose >= 1)


# list / plan / verify -----------------------------------------------------------------
_STATE = {"none": "built", "record": "record", "build": "build"}


def task_state(states: dict[str, str]) -> str:
    """One task's images in words: what a build would do."""
    if any(s == "unknown" for s in states.values()):
        return "unknown (Docker daemon unreachable)"
    if all(s == "built" for s in states.values()):
        return "built"
    words = []
    for action, say_ in (("build", "to build"), ("record", "present, to record")):
        kinds = [k for k, s in states.items() if s == action]
        if kinds:
            words.append(f"{say_}: {', '.join(kinds)}")
    return "; ".join(words)


def task_rows(pipe: Pipeline, ids: list[str] | None) -> tuple[list[dict[str, Any]], Presence]:
    """One row per selected task: id, name, base, metadata, tags, what a build would do
    (the planner's decision per image: built, record, build, or unknown without a daemon)
    and whether the leaderboard ranks it."""
    refs = pipe.images(ids)
    found = presence(pipe, refs, tolerate_daemon=True)
    decided = {d.ref: _STATE[d.action] for d in plan_images(pipe, refs, found)}
    rows = []
    for task in pipe.tasks(ids):
        tr = pipe.refs[task.id]
        base = pipe.bases.get(task.environment.base) if task.environment.base else None
        images = {k: r for k, r in (("base", base), ("work", tr["work"]),
                                    ("judge", tr["judge"])) if r}
        states = {k: decided[r] if found.known else "unknown" for k, r in images.items()}
        rows.append({"id": task.id, "name": task.name, "base": task.environment.base or "-",
                     "metadata": dict(task.metadata), "work": tr["work"].tag,
                     "judge": tr["judge"].tag, "state": task_state(states),
                     "images": states, "ranked": not pipe.bench.excluded(task)})
    return rows, found


@dataclass
class Plan:
    images: list[ImageRef]
    decisions: list[Decision]  # only those that make something
    found: Presence
    grading: GradePlan


def plan(pipe: Pipeline, ids: list[str] | None, force: bool) -> Plan:
    """What `sforge build` and `sforge grade` would do, and why; changes nothing."""
    refs = pipe.images(ids)
    found = presence(pipe, refs, tolerate_daemon=True)
    decisions = [d for d in plan_images(pipe, refs, found, force) if d.action != "none"]
    return Plan(refs, decisions, found, plan_grading(pipe, ids))


def verify(pipe: Pipeline, ids: list[str] | None) -> list[Path]:
    """Drop the sentinels whose image is gone from the daemon and the registry."""
    return verify_sentinels(pipe, pipe.images(ids))


# build / push / pull ------------------------------------------------------------------
@dataclass
class BuildOutcome:
    refs: list[ImageRef]
    todo: list[ImageRef]
    failed: list[ImageRef]
    reused: int = 0
    pushed: int = 0

    @property
    def made(self) -> list[ImageRef]:
        return [r for r in self.todo if r not in self.failed]


def build_images(pipe: Pipeline, ids: list[str] | None, *, force: bool, push: bool,
                 ex: Execution) -> BuildOutcome:
    from sforge.build.image import push_image, read_sentinel
    from sforge.containers.docker import engine

    refs = pipe.images(ids)
    todo = make_images(pipe, refs, ex, force=force, push=push)
    failed = [r for r in todo if not pipe.sentinel(r).exists()]
    out = BuildOutcome(refs, todo, failed)
    records = [read_sentinel(pipe.sentinel(r)) or {} for r in out.made]
    out.reused = sum(1 for rec in records if rec.get("reused"))
    out.pushed = sum(1 for rec in records if rec.get("pushed"))
    if push and not failed:  # and whatever the registry still lacks
        out.pushed += sum(push_image(pipe, engine(), r) for r in refs)
    return out


def make_images(pipe: Pipeline, refs: list[ImageRef], ex: Execution, *, force: bool = False,
                push: bool = False, quiet: bool = False) -> list[ImageRef]:
    """Make the sentinels of `refs` (build, grade and eval all come here): stale sentinels
    dropped, images already under their tag only recorded (the rule's own function, no DAG),
    the rest built. → the refs that needed making; their sentinels exist when made."""
    from sforge.workflow.targets import make_image_target

    found = presence(pipe, refs)
    drop_stale_sentinels(pipe, refs, found)
    decisions = plan_images(pipe, refs, found, force)
    if force:
        for ref in refs:
            pipe.sentinel(ref).unlink(missing_ok=True)
    todo = [d.ref for d in decisions if d.action != "none"]
    for d in decisions:
        if d.action == "record":
            make_image_target(pipe, pipe.sentinel(d.ref), push=push, found=found)
    pending = [r for r in todo if not pipe.sentinel(r).exists()]
    if pending:
        if not quiet:
            say(f"{len(pending)} of {len(refs)} image(s) to build")
        if not ex.profile and all(pipe.sentinel(d).exists()
                                  for r in pending for d in r.deps):
            build_independent(pipe, pending, ex.jobs, force=force, push=push)
        else:  # images that wait on others, or a cluster: the DAG schedules them
            run_workflow(pipe.config, [pipe.sentinel(r) for r in pending], ex, quiet=quiet,
                         force=force, push=push)
    return todo


def build_independent(pipe: Pipeline, refs: list[ImageRef], jobs: int, *, force: bool,
                      push: bool) -> None:
    """Images whose inputs all exist are independent jobs of the DAG: run the rule's own
    function for each, `jobs` at a time but never more than docker_builds, without paying
    Snakemake's ~1.5 s start."""
    from concurrent.futures import ThreadPoolExecutor

    from sforge.workflow.targets import make_image_target

    def one(ref: ImageRef) -> None:
        try:
            make_image_target(pipe, pipe.sentinel(ref), force=force, push=push)
        except SforgeError as exc:  # listed with its log tail by the caller
            say(str(exc))

    width = max(1, min(jobs, docker_builds(pipe.config)))
    with ThreadPoolExecutor(max_workers=width) as pool:
        list(pool.map(one, refs))


def push_images(pipe: Pipeline, ids: list[str] | None) -> tuple[list[ImageRef], list[ImageRef]]:
    """→ (refs, those pushed): every image the registry lacks is pushed."""
    from sforge.build.image import push_image
    from sforge.containers.docker import engine

    refs = pipe.images(ids)
    return refs, [r for r in refs if push_image(pipe, engine(), r)]


def pull_images(pipe: Pipeline, ids: list[str] | None,
                on_pull: Callable[[ImageRef], None]) -> tuple[list[ImageRef], set[str]]:
    """→ (refs, tags already local); each image the daemon lacks is pulled."""
    from sforge.containers.docker import engine

    refs = pipe.images(ids)
    local = engine().existing_tags(r.tag for r in refs)
    if not pipe.registry:
        raise SforgeError("no registry to pull from (use --registry, SFORGE_REGISTRY or "
                          "registry in benchmark.toml)")
    for ref in refs:
        if ref.tag not in local:
            engine().pull(pipe.remote(ref), ref.tag)
            on_pull(ref)
    return refs, local


# eval / grade / report ----------------------------------------------------------------
def sweep() -> None:
    """Every command starts here, with or without work: remove judge containers whose owner
    died or whose deadline passed (never a live run's). Without a daemon there is nothing to
    sweep, and the command itself says whether it needs one."""
    from sforge.core.errors import InfrastructureError
    from sforge.workflow.targets import sweep_orphans

    try:
        sweep_orphans()
    except InfrastructureError:
        return


def prepare_images(pipe: Pipeline, ids: list[str] | None) -> list[ImageRef]:
    """The base and judge refs grading needs, their sentinels made truthful."""
    refs = pipe.images(ids, kinds=("base", "judge"))
    verify_sentinels(pipe, refs)
    return refs


def ensure_judge(pipe: Pipeline, task_id: str, ex: Execution) -> None:
    """Make the judge image's sentinel (building base and judge first when needed). Images
    already present are only recorded: a first eval into a new results directory (a CI job,
    a new user) starts no Snakemake."""
    refs = pipe.images([task_id], kinds=("base", "judge"))
    make_images(pipe, refs, ex, quiet=True)
    if not all(pipe.sentinel(r).exists() for r in refs):
        raise SforgeError(f"cannot build the judge image of {task_id} "
                          f"(see: sforge build --task {task_id})")


def result_view(pipe: Pipeline, result, source: str) -> dict[str, Any]:
    from sforge.benchmark.rescaling import rescale

    task = pipe.bench.tasks[result.task]
    data = result.to_dict()
    data["source"] = source
    data["rescaled"] = rescale(task.score.rescale, result.score) if result.valid else None
    data["direction"] = task.score.direction
    return data


@dataclass
class EvalOutcome:
    target: EvalTarget
    result: Any  # EvalResult
    path: Path
    already: bool = False
    notes: list[str] = field(default_factory=list)


def regrade(pipe: Pipeline, ids: list[str] | None) -> int:
    """Set the stored results of the tasks `ids` aside into history/, so they are graded
    again (a grader that is not deterministic, an image rebuilt under the same tag); the
    tables then use the new verdicts. → how many were set aside."""
    from sforge.grading.results import retire

    if not ids:
        return 0
    return sum(retire(p) is not None for p in sorted({p for _, p in pipe.records(ids)}))


def eval_archive(pipe: Pipeline, task_id: str, archive: str, source: str,
                 timeout: float | None, ex: Execution, stdin: IO[bytes] | None = None,
                 force: bool = False) -> EvalOutcome:
    """Store `archive` (a path, or - for `stdin`) and grade it with the task's judge; with
    `force`, grade it again although a result is stored (the old one goes to history/)."""
    from sforge.benchmark.submissions import store_archive
    from sforge.grading.results import load_result
    from sforge.workflow.targets import grade

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
        with path.open("rb") as fh:
            sub = store_archive(store, source, task.id, fh, now)
    pipe.archive_hashes.note(sub.path, sub.sha256)  # hashed while stored: not read again to hash
    target = pipe.eval_target(task.id, sub.sha256, sub.path, task)
    out = pipe.eval_path(target)
    if force:
        from sforge.grading.results import retire

        retire(out)
    stored = load_result(out)  # an unreadable one is set aside and graded again
    if stored is not None:
        return EvalOutcome(target, stored, out, already=True)
    ensure_judge(pipe, task.id, ex)
    return EvalOutcome(target, grade(pipe, target), out)


@dataclass
class GradeOutcome:
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
    from sforge.grading.results import set_aside  # (sforge.scores imports pandas)
    from sforge.scores.cache import _cache_path, read_results

    return read_results(paths, _cache_path(pipe.layout.scores), prune=False,
                        on_unreadable=lambda path, why: set_aside(Path(path), why))


def grade_pending(pipe: Pipeline, ids: list[str] | None, ex: Execution,
                  again: list[str] | None = None) -> GradeOutcome:
    """Grade what has no result (or an unreadable one); `again` names tasks whose results
    are graded anew."""
    regrade(pipe, again)
    return grade_missing(pipe, ids, ex, "grade")


def make_report(pipe: Pipeline, ex: Execution, again: list[str] | None = None) -> bool:
    """Grade what is pending (and the tasks `again` anew), then make the tables and
    report.html; True when all made."""
    from sforge.workflow.targets import stale_tasks, task_fingerprints, update_report_target

    regrade(pipe, again)
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
            from sforge.scores.cache import _RESULT_FIELDS

            at = _RESULT_FIELDS.index("task")
            later = {t for t, fp in prints.items() if fp is None}
            read = {p: f for p, f in out.read.items() if f[at] not in later}
    update_report_target(pipe, prints, read)
    return True


def grade_missing(pipe: Pipeline, ids: list[str] | None, ex: Execution,
                  title: str) -> GradeOutcome:
    """What `grade` and `report` both do (after setting aside the results to grade anew):
    set aside the results of the tasks `ids` that cannot be read, then grade every result
    file their submissions need and lack. Up-to-date results are only stat'ed; a
    `--profile` run grades through Snakemake (cluster jobs), a local one in process
    (sforge.grading.batch)."""
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
    from sforge.grading.batch import describe_error, grade_batch

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


# check --repeat ------------------------------------------------------------------------
REFERENCE_SOURCE = "reference"


@dataclass
class RepeatOutcome:
    """A task's reference archive judged several times, and whether the verdicts agree."""
    task: str
    archive: Path
    verdicts: list[tuple[bool, float | None, str]]  # (valid, score, reason or summary)

    @property
    def differ(self) -> bool:
        return len({(v, s) for v, s, _ in self.verdicts}) > 1


def repeat_references(pipe: Pipeline, ids: list[str] | None, times: int,
                      ex: Execution) -> tuple[list[RepeatOutcome], list[str]]:
    """Judge each selected task's reference archive(s) (source "reference" in the
    submissions) `times` times in fresh containers; nothing is stored as a result. A grader
    whose verdicts differ passes or fails by chance (timing, randomness, network).
    → outcomes, and the tasks that have no reference to judge."""
    outcomes: list[RepeatOutcome] = []
    tasks = pipe.tasks(ids)
    refs = {t.id: [s for s in pipe.submissions() if s.task == t.id
                   and s.source == REFERENCE_SOURCE] for t in tasks}
    missing = [t for t, subs in refs.items() if not subs]
    if any(refs.values()):
        sweep()
    for task in tasks:
        if not refs[task.id]:
            continue
        ensure_judge(pipe, task.id, ex)
        for sub in refs[task.id]:
            outcomes.append(judge_repeatedly(pipe, task, sub.path, sub.sha256, times))
    return outcomes, missing


def judge_repeatedly(pipe: Pipeline, task: Any, archive: Path, sha256: str,
                     times: int) -> RepeatOutcome:
    """Judge one archive `times` times in fresh containers (its judge image made); nothing
    is stored as a result, the logs go under <results>/check/repeat/."""
    from sforge.containers.docker import engine
    from sforge.grading.contract import archive_limits, container_limits
    from sforge.grading.judge import run_judge

    limits, bounds = archive_limits(pipe.config), container_limits(pipe.config)
    tag = pipe.refs[task.id]["judge"].tag
    verdicts = []
    for i in range(times):
        log = pipe.layout.root / "check" / "repeat" / task.id / f"{sha256[:12]}-{i}.log"
        r = run_judge(engine(), tag, task, archive, limits=limits, log_path=log,
                      container_limits=bounds, submission=sha256)
        verdicts.append((r.valid, r.score, r.reason or r.summary))
    return RepeatOutcome(task.id, archive, verdicts)
