"""The functions Snakemake rules call, one per rule; the CLI's fast paths call the same ones.

No business logic lives in .smk files and none is written twice between CLI and rules.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sforge.benchmark.images import ImageRef
from sforge.build.image import ensure_local, make_image
from sforge.containers.docker import engine
from sforge.containers.engine import RegistryError
from sforge.core.bulk import no_gc
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.core.units import memory_mb
from sforge.grading.results import EvalResult
from sforge.plan.pipeline import EvalTarget, Pipeline
from sforge.plan.planner import Presence

if TYPE_CHECKING:
    from sforge.grading.claims import Claim
    from sforge.grading.judge import PreparedJudge


# images -----------------------------------------------------------------------------
def _same_log(log: str | Path | None, expected: Path) -> None:
    """The build and the judge write their own logs (streamed as they run); the rule's
    `log:` names that very file, from the same Layout method."""
    if log is not None and Path(log).resolve() != expected.resolve():
        raise SforgeError(f"the rule's log {log} is not where this job writes it ({expected})")


@contextlib.contextmanager
def job_log(log: str | Path | None, what: str) -> Iterator[None]:
    """Record one job in the file its rule's `log:` names: start, sforge's log messages
    from this thread (warnings of the aggregation, for one), the time taken or the error."""
    if log is None:
        yield
        return
    path = Path(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)  # jobs run in threads
    logger = logging.getLogger("sforge")
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    start = time.monotonic()
    logger.info("%s: started", what)
    try:
        yield
    except BaseException as exc:
        logger.error("%s: failed: %s\n%s", what, exc, traceback.format_exc())
        raise
    else:
        logger.info("%s: done in %.2f s", what, time.monotonic() - start)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def make_image_target(pipe: Pipeline, output: Path | str, *, force: bool = False,
                      push: bool = False, found: Presence | None = None,
                      log: str | Path | None = None) -> dict:
    """Make the image whose sentinel is `output` (a path of Layout.sentinel). Run flags are
    arguments, never read from the (shared, cached) pipeline."""
    kind, name, digest = pipe.layout.sentinel_parts(output)
    _same_log(log, pipe.layout.build_log(kind, name, digest))
    ref = pipe.ref_for(kind, name)
    if ref.digest != digest:
        raise SforgeError(f"{kind} {name}: asked for hash {digest} but its files now hash to "
                          f"{ref.digest}; the benchmark changed while planning, run again")
    return make_image(pipe, engine(), ref, force=force, push=push, found=found)


# nodes ------------------------------------------------------------------------------
def warn(message: str) -> None:
    """A note for the job's log (stderr: a cluster job's SLURM log)."""
    print(f"sforge: {message}", file=sys.stderr, flush=True)


def node_name() -> str:
    """The machine a judge runs on, as people name it: SLURM's node name inside a job."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


_sweep_lock = threading.Lock()
_swept: list[str] | None = None


def sweep_orphans() -> list[str]:
    """Remove judge containers that dead sforge processes left on this machine's Docker
    daemon, once per process, before its first judge. On a cluster node the only sforge
    processes are jobs, so each node's next job sweeps what a killed job left there.
    → the ids removed (by this call or the process's earlier one)."""
    global _swept
    with _sweep_lock:
        if _swept is None:
            from sforge.containers.owner import sweep_stale_containers, sweep_stale_dirs

            _swept = sweep_stale_containers(engine())
            for cid in _swept:
                warn(f"removed stale judge container {cid[:12]} on {node_name()}")
            sweep_stale_dirs()  # the out directories those judges wrote into
        return _swept


_pull_locks: dict[str, threading.Lock] = {}


def ensure_judge_image(pipe: Pipeline, ref: ImageRef) -> None:
    """The judge image in this node's daemon before grading: pulled from the registry by its
    content tag when missing (nodes never build). No image → an infrastructure error that
    names the node, the image and the registry, never a verdict."""
    eng = engine()
    with _pull_locks.setdefault(ref.tag, threading.Lock()):
        if eng.image_id(ref.tag) is not None:
            return
        node = node_name()
        if not pipe.registry:
            raise InfrastructureError(
                f"node {node}: judge image {ref.tag} is not in its Docker daemon and no "
                f"registry is configured (build it: sforge build --task {ref.name}; on "
                "several nodes build with a registry and --push)")
        started = time.monotonic()
        try:
            ensure_local(pipe, eng, ref)
        except RegistryError as exc:
            raise InfrastructureError(
                f"node {node}: cannot pull judge image {ref.tag} from registry "
                f"{pipe.registry} ({exc}); push it from the build host (sforge push) and "
                f"check that {node} reaches {pipe.registry} (sforge doctor --profile ...)"
            ) from None
        warn(f"pulled {pipe.remote(ref)} on {node} in {time.monotonic() - started:.1f} s")


# grading ----------------------------------------------------------------------------
def judge_threads(pipe: Pipeline, task_id: str) -> int:
    return max(1, math.ceil(pipe.bench.tasks[task_id].judge.cpus))


def judge_mem_mb(pipe: Pipeline, task_id: str) -> int:
    return memory_mb(pipe.bench.tasks[task_id].judge.memory)


def judge_runtime_min(pipe: Pipeline, task_id: str) -> int:
    """Cluster wall clock: the judge timeout plus a margin for start-up and image pulls."""
    return math.ceil(pipe.bench.tasks[task_id].judge.timeout_sec / 60) + 5


_stopping = threading.Event()


class GradingStopped(InfrastructureError):
    """This process is stopping (Ctrl-C): a judge it stopped leaves no result."""


def stop_grading() -> list[str]:
    """Stop every judge this process runs (Ctrl-C of a batch): from now on no verdict is
    written, then their containers are removed. The process is about to exit. → ids removed."""
    _stopping.set()
    from sforge.containers.owner import remove_own

    try:
        return remove_own(engine())
    except InfrastructureError as exc:  # the next command's sweep removes them
        warn(str(exc))
        return []


def grade(pipe: Pipeline, target: EvalTarget) -> EvalResult:
    """The result of one eval key: the stored one, else the judge's, written atomically.

    Every grader (CLI, Snakemake rule, cluster job, judge service) comes through here, so
    each gets the per-key claim: whatever number of processes and hosts share a results
    directory, a key is judged once; a process that finds the key claimed waits for that
    result (or takes the claim over when its holder died or overran). An unreadable stored
    result is set aside into history/ and graded again. Returning normally always means the
    result file exists, so Snakemake never sees this job fail because another won the race.

    It is its two halves in a row. A batch (sforge.grading.batch) runs `prepare_grade(ahead=True)`
    of the next evals while the current judge is in `finish_grade`.
    """
    return finish_grade(pipe, prepare_grade(pipe, target))


@dataclass
class PendingGrade:
    """One eval key on its way to a result: the result already stored; or, prepared
    ahead, the key's claim and its judge container with the submission in it, not started
    (made at `made_at`); or neither (the claim is taken when it is finished)."""

    target: EvalTarget
    stored: EvalResult | None = None
    claim: Claim | None = None
    judge: PreparedJudge | None = None
    made_at: float = 0.0

    def close(self) -> None:
        """Remove a prepared container that will not run, and release the claim."""
        from sforge.grading.claims import release

        if self.judge is not None:
            judge, self.judge = self.judge, None
            judge.close()
        if self.claim is not None:
            claim, self.claim = self.claim, None
            release(claim)


def _ttl(target: EvalTarget) -> float:
    from sforge.grading.judge_container import DEADLINE_GRACE_S

    return target.spec.judge.timeout_sec + DEADLINE_GRACE_S


def prepare_grade(pipe: Pipeline, target: EvalTarget, ahead: bool = False) -> PendingGrade:
    """The first half of `grade`: the stored result if there is one (nothing else done);
    else the archive checked against the plan and the judge image present on this node.
    `ahead`: also claim the key, if nobody holds it, and create its judge container with
    the submission extracted, so that `finish_grade` only starts it. A key claimed by
    another process gets no container: `finish_grade` waits for that result."""
    from sforge.grading.claims import try_claim
    from sforge.grading.results import load_result

    out = pipe.eval_path(target)
    stored = load_result(out)
    if stored is not None:
        return PendingGrade(target, stored=stored)
    actual = pipe.archive_hashes.sha256(target.archive)
    if actual != target.sha256:
        raise SforgeError(f"{target.archive} changed since planning (sha256 {actual}); "
                          "run again")
    sweep_orphans()
    ensure_judge_image(pipe, target.judge)
    pending = PendingGrade(target)
    if ahead:
        pending.claim = try_claim(pipe.layout.eval_claim(target.task, target.key),
                                  _ttl(target), f"{target.task} {target.archive}")
    if pending.claim is not None:
        try:
            pending.stored = load_result(out)  # written between our look and our claim
            if pending.stored is None:
                pending.judge = _prepare_judge(pipe, target)
                pending.made_at = time.monotonic()
        except BaseException:
            pending.close()
            raise
        if pending.stored is not None:
            pending.close()
    return pending


def _not_stopping(target: EvalTarget) -> None:
    """No judge container is made or started once `stop_grading` began (it removes only
    the containers that exist when it looks)."""
    if _stopping.is_set():
        raise GradingStopped(f"{target.task} {target.archive}: stopped, not graded")


def _prepare_judge(pipe: Pipeline, target: EvalTarget) -> PreparedJudge:
    from sforge.grading.contract import archive_limits, container_limits
    from sforge.grading.judge import prepare_judge

    _not_stopping(target)
    # The target's key and sha256 are handed down: the judge neither hashes the archive
    # again nor has its result fields patched afterwards.
    prepared = prepare_judge(engine(), target.judge.tag, target.spec, target.archive,
                             limits=archive_limits(pipe.config),
                             log_path=pipe.layout.eval_log(target.task, target.key),
                             key=target.key, submission=target.sha256,
                             container_limits=container_limits(pipe.config))
    if _stopping.is_set():  # made while stop_grading listed ours: it did not see this one
        prepared.close()
        _not_stopping(target)
    return prepared


def finish_grade(pipe: Pipeline, pending: PendingGrade,
                 on_exit: Callable[[], None] | None = None) -> EvalResult:
    """The second half of `grade`: under the key's claim (held since `prepare_grade`, or
    taken now, or waited for while another process holds it), run the judge and write its
    result atomically; container removed and claim released whatever happens. `on_exit()`
    is called once the judge has stopped, before its result is read (not at all when no
    judge runs here: a stored result, another process's, an error)."""
    from sforge.grading.claims import holding
    from sforge.grading.judge_container import DEADLINE_GRACE_S
    from sforge.grading.results import load_result

    if pending.stored is not None:
        return pending.stored
    target, task = pending.target, pending.target.spec
    out = pipe.eval_path(target)
    try:
        # Claimed and prepared ahead, but waited longer than this: both are made afresh.
        # The claim's deadline and the container's deadline label (wall clock + grace from
        # when they were made) must still cover the whole run, or another sforge process
        # would take them for abandoned.
        if pending.claim is not None and time.monotonic() - pending.made_at > \
                DEADLINE_GRACE_S / 2:
            pending.close()
        if pending.claim is not None:
            return _judge(pipe, pending, out, on_exit)
        with holding(pipe.layout.eval_claim(task.id, target.key), _ttl(target),
                     lambda: load_result(out), what=f"{task.id} {target.archive}"
                     ) as (claim, other):
            if claim is None:
                assert other is not None
                return other  # graded meanwhile by another process
            pending.judge = _prepare_judge(pipe, target)
            return _judge(pipe, pending, out, on_exit)
    finally:
        pending.close()


def _judge(pipe: Pipeline, pending: PendingGrade, out: Path,
           on_exit: Callable[[], None] | None) -> EvalResult:
    """Run the prepared judge (the key claimed) and write its verdict."""
    assert pending.judge is not None
    _not_stopping(pending.target)
    result = pending.judge.run(on_exit)
    _not_stopping(pending.target)  # stopped by Ctrl-C while it ran: what it saw is no verdict
    return result.write(out)


def grade_target(pipe: Pipeline, output: Path | str, log: str | Path | None = None
                 ) -> EvalResult:
    """Grade the archive whose result file is `output` (a path of Layout.eval_result)."""
    _, key = pipe.layout.eval_parts(output)
    target = pipe.evals.get(key)
    if target is None:
        raise SforgeError(f"no submission has eval key {key}")
    _same_log(log, pipe.layout.eval_log(target.task, key))
    return grade(pipe, target)


# blobs ------------------------------------------------------------------------------
def blob_paths(pipe: Pipeline, task_id: str, kind: str) -> list[Path]:
    from sforge.benchmark.images import context_blobs

    task = pipe.bench.tasks[task_id]
    return [task.dir / b.path for b in context_blobs(task, kind)]


def fetch_blob_target(pipe: Pipeline, output: Path | str, log: str | Path | None = None
                      ) -> Path:
    """Fetch the declared blob at `output` (a path inside a task directory)."""
    from sforge.benchmark.blobs import ensure_blob

    wanted = Path(output).resolve()
    found = [(task, b) for task in pipe.bench.tasks.values() for b in task.blobs
             if (task.dir / b.path).resolve() == wanted]
    if not found:
        raise SforgeError(f"{output}: not a declared blob of any task")
    task, blob = found[0]
    with job_log(log, f"blob {task.id}/{blob.path}"):
        present = (task.dir / blob.path).is_file()
        path = ensure_blob(pipe.bench, task, blob, pipe.cache)
        pipe.cache.save()
        logging.getLogger("sforge.benchmark.blobs").info(
            "%s %s (sha256 %s)", "verified" if present else "fetched and verified", path,
            blob.sha256)
    return path


# tables -----------------------------------------------------------------------------
def products_lock(pipe: Pipeline) -> contextlib.AbstractContextManager[None]:
    """One writer of a results directory's tables and pages at a time (every path that
    writes them takes it): two reports interleaving their writes left the best.csv of one
    beside the scores.csv of the other, under a store that said nothing changed."""
    from sforge.core.fileio import exclusive

    root = pipe.layout.root
    return exclusive(pipe.layout.cache / "tables.lock", lambda: print(
        f"sforge: waiting for another report on {root} to finish its tables and pages",
        file=sys.stderr, flush=True))


def write_scores_target(pipe: Pipeline, output: Path | str,
                        log: str | Path | None = None) -> None:
    from sforge.scores import write_scores

    with job_log(log, "scores.csv"), products_lock(pipe):
        records = pipe.records()
        write_scores(pipe.bench, records, Path(output))
        logging.getLogger("sforge.scores").info("%d submission(s), %d result file(s)",
                                                len(records), len({p for _, p in records}))


def write_best_target(pipe: Pipeline, scores: Path | str, output: Path | str,
                      log: str | Path | None = None) -> None:
    from sforge.scores import write_best

    with job_log(log, "best.csv"), products_lock(pipe):
        write_best(pipe.bench, Path(scores), Path(output))


def write_leaderboard_target(pipe: Pipeline, best: Path | str, scores: Path | str,
                             csv: Path | str, md: Path | str, budgets: Path | str,
                             log: str | Path | None = None) -> None:
    from sforge.scores import write_leaderboard

    with job_log(log, "leaderboard"), products_lock(pipe):
        write_leaderboard(pipe.bench, Path(best), Path(scores), Path(csv), Path(md),
                          Path(budgets), [float(h) for h in pipe.config.get("budgets_hours", [])])


def write_report_target(pipe: Pipeline, scores: Path | str, best: Path | str,
                        leaderboard: Path | str, budgets: Path | str, output: Path | str,
                        log: str | Path | None = None) -> None:
    from sforge.report.pages import write_report

    with job_log(log, "report.html"), products_lock(pipe):
        pages = write_report(pipe.bench, Path(scores), Path(best), Path(leaderboard),
                             Path(budgets), Path(output))
        logging.getLogger("sforge.report.pages").info("%d page(s), %d bytes", len(pages),
                                                sum(p.stat().st_size for p in pages))


def _budgets(pipe: Pipeline) -> list[float]:
    return [float(h) for h in pipe.config.get("budgets_hours", [])]


def _table_step_logs(pipe: Pipeline) -> None:
    for step in ("best", "leaderboard"):
        with job_log(pipe.layout.step_log(step),
                     f"{step}: made with scores.csv, from per-task parts"):
            pass


def task_fingerprints(pipe: Pipeline, ids: list[str] | None = None) -> dict[str, str | None]:
    """task → the folder fingerprint of its tables (sforge.scores.folders)."""
    from sforge import __version__
    from sforge.scores.folders import fingerprints

    judges = {t: refs["judge"] for t, refs in pipe.refs.items() if "judge" in refs}
    head = json.dumps([__version__, _budgets(pipe)])
    return fingerprints(pipe.bench, judges, [pipe.submissions_dir, pipe.layout.store],
                        pipe.layout.root / "evals", head, ids)


def stale_tasks(pipe: Pipeline, prints: dict[str, str | None]) -> list[str]:
    """The tasks whose tables cannot be taken from the cache as they are."""
    from sforge.scores.store import fresh_tasks

    fresh = fresh_tasks(pipe.layout.scores, prints)
    return [t for t in prints if t not in fresh]


def update_report_target(pipe: Pipeline, prints: dict[str, str | None],
                         known: dict[str, tuple[Any, ...]] | None = None) -> int:
    """`sforge report`'s tables and pages: only the tasks whose fingerprint changed are
    listed, computed and rendered; the rest comes from the cache (no DAG, no reading of
    up-to-date results). `known`: the result fields grading's check has just read.
    → how many tasks were computed again."""
    with products_lock(pipe):
        return _update_report(pipe, prints, known)


def _update_report(pipe: Pipeline, prints: dict[str, str | None],
                   known: dict[str, tuple[Any, ...]] | None) -> int:
    from sforge.report.state import report_current
    from sforge.scores.store import TablePaths, stored_parts_if_current

    lay = pipe.layout
    tables = TablePaths(lay.scores, lay.best, lay.leaderboard, lay.leaderboard_md, lay.budgets)
    # Nothing changed (the usual report of a CI job that graded nothing new): decided from
    # the stores alone, without importing pandas and the templates (~0.5 s).
    stored = stored_parts_if_current(lay.scores, prints, tables.every())
    if stored is not None and report_current(pipe.bench, lay.report, stored, prints):
        with job_log(lay.step_log("scores"), "scores.csv (tables by task)"):
            logging.getLogger("sforge.scores").info(
                "nothing changed: %d task(s) taken from the cache", len(stored))
        return 0
    from sforge.report.pages import update_report
    from sforge.scores.cache import _cache_path
    from sforge.scores.parts import update_tables
    from sforge.scores.ranking import score_rows

    with job_log(lay.step_log("scores"), "scores.csv (tables by task)"), no_gc():
        update = update_tables(pipe.bench, tables, _budgets(pipe), prints, pipe.record_rows,
                               lambda ids: task_fingerprints(pipe, ids), known)
        logging.getLogger("sforge.scores").info(
            "%d submission(s); %d task(s) computed, %d taken from the cache",
            sum(p["index"]["graded"] for p in update.parts.values()), len(update.made),
            len(update.parts) - len(update.made))
    _table_step_logs(pipe)
    with job_log(lay.step_log("report"), "report.html"), no_gc():
        pages = update_report(pipe.bench, update, lay.best, lay.leaderboard, lay.budgets,
                              lay.report, lambda ids: score_rows(
                                  pipe.bench, pipe.record_rows(ids), _cache_path(lay.scores),
                                  prune=False))
        logging.getLogger("sforge.report.pages").info("%d page(s) written", len(pages))
    return len(update.made)


# sforge doctor ------------------------------------------------------------------------
def doctor_node_target(pipe: Pipeline, run: str, node: str, out: str,
                       log: str | None = None) -> None:
    from sforge.commands.doctor import node_report

    with job_log(log, f"doctor: node {node}"):
        node_report(pipe, run, node, Path(out))
