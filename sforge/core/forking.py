"""Pure-CPU work shared out to forked worker processes: a cold report parses 100,000 result
files and renders 200 task pages, each independent of the next, and JSON parsing and
markup hold the GIL, so threads do not help (they are 2–3× slower, measured) while a
second core halves the wall clock.

A fork inherits everything the parent holds (the benchmark, the tables), so nothing big is
pickled: only each item's answer comes back. The work stays serial where a fork would not
pay (few items, one core) or is not safe: a process with other threads (the judge service,
a Snakemake job) may have a lock held at the moment of the fork, and the child would
inherit it held forever. A worker never forks again: the cores are taken already, and a
nested map run in a worker would swap the job out from under the worker's next items.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sforge.core.errors import SforgeError

T = TypeVar("T")
R = TypeVar("R")

_JOB: Callable[[Any], Any] | None = None
_IN_WORKER = False  # set in each worker process as it starts


def _mark_worker() -> None:
    global _IN_WORKER
    _IN_WORKER = True


def _run_job(item: Any) -> Any:
    assert _JOB is not None
    return _JOB(item)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def fork_map(one: Callable[[T], R], items: Sequence[T], per_process: int) -> list[R]:
    """[one(item) for item in items], in order, in up to one worker per usable core when
    there are at least `per_process` items for each; an exception in a worker is raised
    here. `one` may be a closure: the workers are forks, it is never pickled (its answers
    are)."""
    procs = min(usable_cores(), len(items) // max(1, per_process))
    if procs < 2 or _IN_WORKER or threading.active_count() > 1:
        return [one(item) for item in items]
    import multiprocessing  # 20 ms: only where it is used (not on an eval's path)
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    if "fork" not in multiprocessing.get_all_start_methods():
        return [one(item) for item in items]
    global _JOB
    _JOB = one
    try:
        # Not multiprocessing.Pool: its map waits forever for a worker that was killed
        # (kill -9, the OOM killer); the executor says so instead.
        with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_mark_worker) as ex:
            return list(ex.map(_run_job, items, chunksize=max(1, len(items) // (procs * 8))))
    except BrokenProcessPool as exc:
        raise SforgeError("a worker process died (killed, or out of memory) before it "
                          "finished; nothing it did was taken: run again") from exc
    finally:
        _JOB = None


__all__ = ["fork_map", "usable_cores"]
