"""Judges within a capacity of cores and memory, through the one grading function.

The queue is the `queued` rows of the state database, oldest first. A judge starts when
its demand (sforge.grading.capacity: `[judge] cpus` rounded up to whole cores, and `[judge]
memory`) fits in what is left of `capacity`, the rule of `sforge grade -j` and of the
evaluate rule's resources (a judge asking for more than the whole capacity runs alone).
Two submissions with one eval key never run two judges: the
later waits and gets the earlier's result. Docker trouble puts the submission back in the
queue with a growing delay (it is graded when the daemon returns, never marked invalid).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.capacity import Capacity, JudgeDemand
from sforge.service.state import State

log = logging.getLogger("sforge.service")

RETRY_MIN_S = 2.0
RETRY_MAX_S = 60.0
# A submission that fails this often for a reason that is neither the daemon nor the
# archive (a bug, a broken benchmark) gets an invalid result saying so, not an endless loop.
MAX_ATTEMPTS = 5


class Ungradable(SforgeError):
    """A submission no attempt can grade (its task left the benchmark): its result says why
    at once."""


class Scheduler:
    """The service's judge loop: starts queued submissions while their demand fits capacity."""
    def __init__(self, state: State, capacity: Capacity,
                 demand: Callable[[dict[str, Any]], JudgeDemand],
                 grade: Callable[[dict[str, Any]], tuple[dict[str, Any], bool]],
                 on_done: Callable[[list[int]], None]):
        self.state = state
        self.capacity = capacity    # held and released under self.cond
        self.demand = demand        # submission row -> what its judge holds
        self.grade = grade          # submission row -> (result view, judged here?)
        self.on_done = on_done      # ids that now have a result (or were dropped)
        self.cond = threading.Condition()
        self.running: dict[int, tuple[str, JudgeDemand]] = {}   # id -> (key, held)
        self.threads: dict[int, threading.Thread] = {}
        self.stopping = False
        self.durations: list[float] = []
        self._loop = threading.Thread(target=self._run, name="sforge-scheduler", daemon=True)

    # control ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop's thread; judges start as the queue fills."""
        self._loop.start()

    def wake(self) -> None:
        """Make the loop look at the queue now (a submission arrived or capacity came back)."""
        with self.cond:
            self.cond.notify_all()

    def stop(self, drain_s: float) -> list[int]:
        """Start nothing more; let running judges finish for up to `drain_s` seconds.
        Those still running are recorded as interrupted (queued for the next start);
        their containers are removed by the caller."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self._loop.join(timeout=5)
        deadline = time.monotonic() + drain_s
        for thread in list(self.threads.values()):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self.cond:
            left = list(self.running)
        for sub_id in left:
            self.state.interrupt(sub_id)
        return left

    def join_judges(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the judge threads still running to leave."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self.threads.values()):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # figures ------------------------------------------------------------------------
    def mean_duration(self) -> float:
        """Mean seconds of the last 50 judges (5 before any), to estimate a queue's wait."""
        recent = self.durations[-50:]
        return sum(recent) / len(recent) if recent else 5.0

    def retry_after(self, waiting: int = 1) -> int:
        """Seconds a refused client should wait: a judge frees a place about every
        mean-judge-time / capacity seconds; with `waiting` clients refused, spreading their
        retries uniformly over the time those places take makes retries arrive about as
        fast as places free up (one herd retrying at once would mostly be refused again)."""
        span = self.mean_duration() * max(1, waiting) / self.capacity.cores
        return max(1, min(300, random.randint(1, max(1, math.ceil(span)))))

    # the loop -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self.cond:
                if self.stopping:
                    return
                started = self._start_some()
                if not started:
                    self.cond.wait(timeout=self._sleep_s())

    def _sleep_s(self) -> float:
        nxt = self.state.next_retry()
        if nxt is None:
            return 5.0
        return min(5.0, max(0.05, nxt - time.time()))

    def _start_some(self) -> int:
        started = 0
        running_keys = {key for key, _ in self.running.values()}
        for sub in self.state.queued(time.time()):
            if sub["key"] in running_keys:
                continue  # an identical archive is being judged: it gets that result
            demand = self.demand(sub)
            if not self.capacity.fits(demand):
                break  # first come, first served: nothing overtakes the head
            self.running[sub["id"]] = (sub["key"], self.capacity.take(demand))
            running_keys.add(sub["key"])
            self.state.start(sub["id"])
            thread = threading.Thread(target=self._judge, args=(sub,), daemon=True,
                                      name=f"sforge-judge-{sub['id']}")
            self.threads[sub["id"]] = thread
            thread.start()
            started += 1
        return started

    def _judge(self, sub: dict[str, Any]) -> None:
        t0 = time.monotonic()
        done: list[int] = []
        try:
            result, judged = self.grade(sub)
        except InfrastructureError as exc:
            self._retry(sub, exc)
        except Ungradable as exc:
            done = self.state.finish(sub["key"], failure(sub, str(exc)), sub["id"])
        except SforgeError as exc:
            if sub["attempts"] + 1 >= MAX_ATTEMPTS:
                done = self.state.finish(sub["key"], failure(sub, self._gave_up(exc)),
                                         sub["id"])
            else:
                self._retry(sub, exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the service
            log.exception("grading submission %s failed", sub["id"])
            if sub["attempts"] + 1 >= MAX_ATTEMPTS:
                done = self.state.finish(sub["key"], failure(sub, self._gave_up(exc)),
                                         sub["id"])
            else:
                self._retry(sub, exc)
        else:
            done = self.state.finish(sub["key"], result, sub["id"] if judged else None)
            if judged:
                self.durations.append(time.monotonic() - t0)
        finally:
            with self.cond:
                _, held = self.running.pop(sub["id"], ("", JudgeDemand(0, 0)))
                self.threads.pop(sub["id"], None)
                self.capacity.release(held)
                self.cond.notify_all()
        if done:
            self.on_done(done)

    @staticmethod
    def _gave_up(exc: Exception) -> str:
        return f"sforge could not grade it after {MAX_ATTEMPTS} attempts: {exc}"

    def _retry(self, sub: dict[str, Any], exc: Exception) -> None:
        delay = min(RETRY_MAX_S, RETRY_MIN_S * 2 ** min(sub["attempts"], 5))
        log.warning("submission %s: %s (retrying in %.0f s)", sub["id"], exc, delay)
        self.state.retry_later(sub["id"], delay, str(exc))


def failure(sub: dict[str, Any], reason: str) -> dict[str, Any]:
    """The invalid result of a submission sforge could not grade (kept in the service's
    state, never in the eval store: it is no verdict of the judge)."""
    return {"task": sub["task"], "submission": sub["sha256"], "key": sub["key"],
            "valid": False, "score": None, "rescaled": None, "summary": "",
            "reason": reason, "details": [], "rejected": []}

