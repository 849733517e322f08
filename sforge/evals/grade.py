"""The one grading function (`grade`) and its two halves: the per-key claim, the judge run in
its container, the result written atomically. Every grader comes through here: the CLI's
batch, the Snakemake evaluate rule, cluster jobs and the judge service.

Also what grading needs on the node it runs on: the sweep of judge containers dead sforge
processes left, the judge image pulled when missing, the node's name, and a judge's wall clock
on a cluster (its cores and memory are sforge.grading.capacity's).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sforge.benchmark.images import ImageRef
from sforge.build.image import ensure_local
from sforge.containers.docker import engine
from sforge.containers.engine import RegistryError
from sforge.containers.owner import (
    node_name,
    remove_own,
    sweep_stale_containers,
    sweep_stale_dirs,
)
from sforge.core.console import say
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.claims import Claim, holding, release, try_claim
from sforge.grading.contract import archive_limits, container_limits
from sforge.grading.judge import PreparedJudge, prepare_judge
from sforge.grading.judge_container import DEADLINE_GRACE_S
from sforge.grading.results import EvalResult, load_result
from sforge.plan.pipeline import EvalTarget, Pipeline

# nodes ------------------------------------------------------------------------------
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
            _swept = sweep_stale_containers(engine())
            for cid in _swept:
                say(f"removed stale judge container {cid[:12]} on {node_name()}")
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
        say(f"pulled {pipe.remote(ref)} on {node} in {time.monotonic() - started:.1f} s")


# resources --------------------------------------------------------------------------
def judge_runtime_min(pipe: Pipeline, task_id: str) -> int:
    """Cluster wall clock: the judge timeout plus a margin for start-up and image pulls."""
    return math.ceil(pipe.bench.tasks[task_id].judge.timeout_sec / 60) + 5


# grading ----------------------------------------------------------------------------
_stopping = threading.Event()


class GradingStopped(InfrastructureError):
    """This process is stopping (Ctrl-C): a judge it stopped leaves no result."""


def stop_grading() -> list[str]:
    """Stop every judge this process runs (Ctrl-C of a batch): from now on no verdict is
    written, then their containers are removed. The process is about to exit. → ids removed."""
    _stopping.set()
    try:
        return remove_own(engine())
    except InfrastructureError as exc:  # the next command's sweep removes them
        say(str(exc))
        return []


def grade(pipe: Pipeline, target: EvalTarget) -> EvalResult:
    """The result of one eval key: the stored one, else the judge's, written atomically.

    Every grader (CLI, Snakemake rule, cluster job, judge service) comes through here, so
    each gets the per-key claim: whatever number of processes and hosts share a results
    directory, a key is judged once; a process that finds the key claimed waits for that
    result (or takes the claim over when its holder died or overran). An unreadable stored
    result is set aside into history/ and graded again. Returning normally always means the
    result file exists, so Snakemake never sees this job fail because another won the race.

    It is its two halves in a row. A batch (sforge.evals.batch) runs `prepare_grade(ahead=True)`
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
        if self.judge is not None:
            judge, self.judge = self.judge, None
            judge.close()
        if self.claim is not None:
            claim, self.claim = self.claim, None
            release(claim)


def _result_path(pipe: Pipeline, target: EvalTarget) -> Path:
    return pipe.layout.eval_result(target.task, target.key)


def _ttl(target: EvalTarget) -> float:
    return target.spec.judge.timeout_sec + DEADLINE_GRACE_S


def prepare_grade(pipe: Pipeline, target: EvalTarget, ahead: bool = False) -> PendingGrade:
    """The first half of `grade`: the stored result if there is one (nothing else done);
    else the archive checked against the plan and the judge image present on this node.
    `ahead`: also claim the key, if nobody holds it, and create its judge container with
    the submission extracted, so that `finish_grade` only starts it. A key claimed by
    another process gets no container: `finish_grade` waits for that result."""
    out = _result_path(pipe, target)
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
    if pending.stored is not None:
        return pending.stored
    target, task = pending.target, pending.target.spec
    out = _result_path(pipe, target)
    try:
        # Claimed and prepared ahead, but waited longer than this: both are made afresh.
        # The claim's deadline and the container's deadline label (wall clock + grace from
        # when they were made) must still cover the whole run, or another sforge process
        # would take them for abandoned.
        if pending.claim is not None and time.monotonic() - pending.made_at > \
                DEADLINE_GRACE_S / 2:
            pending.close()
        if pending.claim is not None:
            return _judge(pending, out, on_exit)
        with holding(pipe.layout.eval_claim(task.id, target.key), _ttl(target),
                     lambda: load_result(out), what=f"{task.id} {target.archive}"
                     ) as (claim, other):
            if claim is None:
                assert other is not None
                return other  # graded meanwhile by another process
            pending.judge = _prepare_judge(pipe, target)
            return _judge(pending, out, on_exit)
    finally:
        pending.close()


def _judge(pending: PendingGrade, out: Path, on_exit: Callable[[], None] | None
           ) -> EvalResult:
    """Run the prepared judge (the key claimed) and write its verdict."""
    assert pending.judge is not None
    _not_stopping(pending.target)
    result = pending.judge.run(on_exit)
    _not_stopping(pending.target)  # stopped by Ctrl-C while it ran: what it saw is no verdict
    return result.write(out)
