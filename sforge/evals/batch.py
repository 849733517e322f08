"""A batch of pending evals graded on this machine, in process: what a local `sforge grade`
or `sforge report` runs. A `--profile` run (a cluster) and plain `snakemake` go through the
Snakefile's evaluate rule instead; both end in the same function, `sforge.evals.grade.grade`
(per-key claim, judge, result written atomically), so the two paths cannot differ in a verdict.

Why not one Snakemake job per eval here: the plan already names each pending eval with its
archive and judge image, so a DAG adds nothing but cost (importing Snakemake and building the
DAG, ~1.5 s, then bookkeeping per job), and it holds no place where the next container could
be made ready while the current judge runs.

Packing follows the evaluate rule's resources under `-j N`, as Snakemake's local scheduler
applies them, by the one rule of sforge.grading.capacity: a judge takes ceil(cpus) cores (at most N)
and its memory in MiB (at most the machine's); judges start in plan order as cores and
memory allow.

Ctrl-C stops the batch: no new judge starts, the running ones are stopped and their
containers removed, and nothing they did is written (they are graded on the next run).
Results written before stay; a claim left behind is taken over (its owner is gone).
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable

from sforge.core.console import say
from sforge.core.errors import SforgeError
from sforge.evals import grade
from sforge.grading.capacity import Capacity, JudgeDemand, judge_demand, machine_memory_mb
from sforge.plan.pipeline import EvalTarget, Pipeline

Report = Callable[[EvalTarget, BaseException | None], None]


def grade_batch(pipe: Pipeline, targets: list[EvalTarget], jobs: int, report: Report) -> None:
    """Grade `targets` with at most `jobs` cores busy; `report(target, error)` after each
    (error None: its result is written). Failures are reported and the batch goes on.

    Container lifecycles overlap: while judges run, a preparing thread creates the next
    evals' containers and extracts their submissions (`grade.prepare_grade`), and a
    judge's cores are free again the moment it stops, while its result is still being read
    and its container removed (`grade.finish_grade`'s on_exit): so a judge that ends is
    followed at once by one ready to start. Raises KeyboardInterrupt after stopping the
    running judges."""
    from concurrent.futures import Future, ThreadPoolExecutor

    cores = max(1, jobs)
    capacity = Capacity(cores, machine_memory_mb())
    waiting = list(targets)
    running: dict[str, threading.Thread] = {}
    holding: dict[str, JudgeDemand] = {}  # cores and memory of the judges not stopped yet
    ready: dict[str, Future[grade.PendingGrade]] = {}  # prepared ahead, in plan order
    # (target, stopped: its judge stopped, result still to come | done, error or None)
    events: queue.SimpleQueue[tuple[EvalTarget, bool, BaseException | None]] = \
        queue.SimpleQueue()
    preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sforge-prepare")

    def work(target: EvalTarget, pending: Future[grade.PendingGrade]) -> None:
        try:
            grade.finish_grade(pipe, pending.result(),
                         on_exit=lambda: events.put((target, True, None)))
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            events.put((target, False, exc))
        else:
            events.put((target, False, None))

    def prepare(target: EvalTarget) -> Future[grade.PendingGrade]:
        return preparer.submit(grade.prepare_grade, pipe, target, True)

    def release(target: EvalTarget) -> None:
        held = holding.pop(target.key, None)
        if held is not None:
            capacity.release(held)

    def start_what_fits() -> None:
        i = 0
        while i < len(waiting) and capacity.busy_cores < capacity.cores:
            demand = judge_demand(pipe.bench.tasks[waiting[i].task])
            if not capacity.fits(demand):
                i += 1
                continue
            target = waiting.pop(i)
            holding[target.key] = capacity.take(demand)
            pending = ready.pop(target.key, None) or prepare(target)
            # daemon: a stopped batch does not wait for a judge thread blocked on the daemon
            thread = threading.Thread(target=work, args=(target, pending), daemon=True,
                                      name=f"sforge-judge-{target.key[:8]}")
            running[target.key] = thread
            thread.start()
        # as many containers ready as judges could start next (each judge takes a core)
        for target in waiting[:cores]:
            if target.key not in ready:
                ready[target.key] = prepare(target)

    try:
        while waiting or running:
            start_what_fits()
            try:
                target, stopped, error = events.get(timeout=0.5)  # short: Ctrl-C stays live
            except queue.Empty:
                continue
            release(target)
            if not stopped:
                running.pop(target.key).join()
                report(target, error)
    except KeyboardInterrupt:
        n = len(holding)  # judges not stopped yet
        if n:
            say(f"stopping {n} running judge(s); they are graded on the next run")
        preparer.shutdown(wait=False, cancel_futures=True)
        grade.stop_grading()
        for thread in running.values():
            thread.join(timeout=10)
        raise
    finally:
        preparer.shutdown(wait=True, cancel_futures=True)
        for future in ready.values():  # prepared, never started (only after Ctrl-C)
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().close()


def describe_error(target: EvalTarget, error: BaseException) -> str:
    """One eval's failure for the terminal: sforge's own message, or a traceback for a bug."""
    if isinstance(error, SforgeError):
        return f"sforge: {target.task} {target.archive}: {error}"
    trace = "".join(traceback.format_exception(error)).rstrip()
    return f"sforge: {target.task} {target.archive}: unexpected error\n{trace}"
