"""What the endpoints stand on: the loaded benchmark, the state database, the scheduler,
and the glue to the one grading function (sforge.workflow.targets.grade) and the eval
store."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO

from sforge.benchmark.submissions import store_archive
from sforge.commands.evals import result_view
from sforge.commands.images import prepare_images
from sforge.containers.docker import engine
from sforge.containers.owner import sweep_stale_containers
from sforge.core.clock import now_iso
from sforge.core.config import service_settings
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.evals.grade import grade, stop_grading
from sforge.grading.capacity import Capacity, JudgeDemand, judge_demand, machine_memory_mb
from sforge.grading.results import load_result
from sforge.plan.pipeline import EvalTarget, Pipeline
from sforge.service import auth
from sforge.service.scheduler import Scheduler, Ungradable
from sforge.service.state import Conflict, Limits, State, parse_iso
from sforge.workflow.targets import make_image_target

log = logging.getLogger("sforge.service")
SWEEP_EVERY_S = 60.0


def service_dir(pipe: Pipeline) -> Path:
    """Where the service keeps its state, admin token and socket for this pipeline."""
    return pipe.layout.service


class Service:
    """The judge service: runs, the submission queue and its judges over one pipeline."""
    def __init__(self, pipe: Pipeline, *, max_concurrent: float | None = None,
                 max_pending: int | None = None, admin_token: str | None = None):
        self.pipe = pipe
        self.settings = service_settings(pipe.config)
        if max_concurrent is not None:
            self.settings["max_concurrent"] = max_concurrent
        if max_pending is not None:
            self.settings["max_pending"] = max_pending
        self.capacity = float(self.settings["max_concurrent"] or os.cpu_count() or 1)
        # judges hold whole cores of `capacity` and MiB of this machine's memory
        self.memory_mb = machine_memory_mb()
        run_bytes = self.settings.get("max_run_bytes")
        self.limits = Limits(max_pending=int(self.settings["max_pending"]),
                             max_run_bytes=None if run_bytes is None else int(run_bytes))
        self.dir = service_dir(pipe)
        self.admin_token = admin_token or auth.admin_token(self.dir / "admin.token")
        self.state = State(self.dir / "state.sqlite")
        self.scheduler = Scheduler(self.state, Capacity.of(self.capacity, self.memory_mb),
                                   self.demand, self.grade_submission, self._done)
        self.draining = False
        self.started = time.time()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiters: dict[int, list[asyncio.Event]] = {}
        self._ready: set[str] = set()
        self._prepare_lock = threading.Lock()
        self._run_locks: dict[str, threading.Lock] = {}
        self._run_locks_lock = threading.Lock()
        self._stopped = threading.Event()

    # life ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Requeue what was running at the last stop, sweep stale judges, start the scheduler."""
        self.loop = loop
        requeued = self.state.recover()
        if requeued:
            log.warning("%d judge(s) were running when the service stopped: queued again",
                        requeued)
        self.sweep()
        self.scheduler.start()
        threading.Thread(target=self._sweeper, name="sforge-sweeper", daemon=True).start()

    def sweep(self) -> None:
        """Remove judge containers whose owner process is gone (a crashed service's, a
        killed `sforge eval`'s): at start, then every SWEEP_EVERY_S while serving."""
        try:
            for cid in sweep_stale_containers(engine()):
                log.warning("removed stale judge container %s", cid[:12])
        except SforgeError as exc:
            log.warning("cannot sweep stale judge containers: %s", exc)

    def _sweeper(self) -> None:
        while not self._stopped.wait(SWEEP_EVERY_S):
            self.sweep()

    def stop(self) -> None:
        """Drain: stop admitting, give judges `drain_s`, requeue the rest, close the state."""
        self.draining = True
        self._stopped.set()
        left = self.scheduler.stop(float(self.settings["drain_s"]))
        if left:
            log.warning("stopped with %d judge(s) running: recorded as interrupted, "
                        "graded again at the next start", len(left))
            remove_own_judges()
            # Their threads see their containers gone and leave (no verdict written)
            # before the state closes.
            self.scheduler.join_judges(30)
        self.state.close()

    # grading ------------------------------------------------------------------------
    def target(self, task_id: str, sha256: str, archive: Path) -> EvalTarget:
        """The eval target (task, archive hash, path) under which this archive is graded."""
        return self.pipe.eval_target(task_id, sha256, archive)

    def stored(self, target: EvalTarget, source: str) -> dict[str, Any] | None:
        """The result already in the eval store under this key, as a view (an unreadable
        one is set aside and graded again, as everywhere)."""
        result = load_result(self.pipe.eval_path(target))
        return None if result is None else self.view(result, source)

    def view(self, result, source: str) -> dict[str, Any]:
        """A result as the service's answers show it (score, validity, log) for `source`."""
        return result_view(self.pipe, result, source)

    def demand(self, sub: dict[str, Any]) -> JudgeDemand:
        """What the submission's judge holds while it runs (a task gone from the benchmark
        runs no judge: its submission is answered at once)."""
        task = self.pipe.bench.tasks.get(sub["task"])
        return JudgeDemand(1, 0) if task is None else judge_demand(task)

    def grade_submission(self, sub: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Runs in a judge thread: (the stored result, False), or (the verdict of the one
        grading function, True)."""
        run = self.state.run(sub["run_id"]) or {}
        source = run.get("source", "")
        if sub["task"] not in self.pipe.bench.tasks:
            raise Ungradable(self.gone(sub["task"]))
        target = self.target(sub["task"], sub["sha256"], Path(sub["archive"]))
        stored = self.stored(target, source)
        if stored is not None:
            return stored, False
        try:
            self.prepare(sub["task"])
            # grade() holds the per-key claim, so the service, `sforge grade` and other
            # services on this results directory judge a key once; it answers a bad archive
            # with an invalid result (the reason), written like any other.
            return self.view(grade(self.pipe, target), source), True
        except InfrastructureError:
            self._ready.discard(sub["task"])  # look at the images again next time
            raise

    def prepare(self, task_id: str) -> None:
        """The judge image (and its base) present, built when missing: once per task."""
        if task_id in self._ready:
            return
        with self._prepare_lock:
            if task_id in self._ready:
                return
            for ref in prepare_images(self.pipe, [task_id]):
                if not self.pipe.sentinel(ref).exists():
                    log.info("building %s", ref.tag)
                    make_image_target(self.pipe, self.pipe.sentinel(ref))
            self._ready.add(task_id)

    # submissions ----------------------------------------------------------------------
    def submit(self, run: dict[str, Any], upload: BinaryIO, final: bool) -> dict[str, Any]:
        """Store the archive (content-addressed, with its sidecar, where `sforge report`
        finds it) and queue it, or answer it from the eval store at once."""
        # One submission of a run at a time (they run in threads): a budget, cooldown or
        # final refusal then always comes before the archive is stored, never after it.
        with self._run_locks_lock:
            lock = self._run_locks.setdefault(run["run_id"], threading.Lock())
        with lock:
            return self._submit(run, upload, final)

    def _submit(self, run: dict[str, Any], upload: BinaryIO, final: bool) -> dict[str, Any]:
        now = time.time()
        size = upload.seek(0, os.SEEK_END)
        upload.seek(0)
        self.state.check(run, final, self.limits, now, size)  # before touching the store
        task = self.pipe.bench.tasks.get(run["task"])
        if task is None:
            raise Conflict(self.gone(run["task"]))
        elapsed = max(0.0, round(now - parse_iso(run["started_at"]), 3))  # a skewed clock
        created: list[Path] = []
        sub = store_archive(self.pipe.layout.store, run["source"], task.id, upload,
                            now_iso("milliseconds", now),
                            {"elapsed_s": elapsed, "agent": run["agent"], "model": run["model"]},
                            created)
        try:
            target = self.target(task.id, sub.sha256, sub.path)
            stored = self.stored(target, run["source"])
            row = self.state.accept(run["run_id"], sha256=sub.sha256, archive=str(sub.path),
                                    key=target.key, cpus=float(task.judge.cpus), final=final,
                                    limits=self.limits, now=now, result=stored, size=size)
        except BaseException:
            # Refused after all (the queue filled, the run ended since the check): what
            # this call stored goes, or `sforge report` would count a refused archive.
            self.state.remove_unless_submitted(str(sub.path), created)
            raise
        if stored is None:
            self.scheduler.wake()
        return row

    def gone(self, task_id: str) -> str:
        """Why a run of a task no longer in the benchmark can submit nothing more."""
        return (f"task {task_id} is no longer in benchmark {self.pipe.bench.name} (the "
                "service was started without it): its runs can submit nothing more")

    def register(self, task: str, run_id: str | None, source: str | None,
                 agent: str | None, model: str | None, budget: int | None,
                 cooldown_s: float | None, started_at: str | None
                 ) -> tuple[dict, str, str]:
        """→ (run, the agent's token, sforge's final token)."""
        run_id = run_id or uuid.uuid4().hex[:12]
        token, final = auth.new_token(), auth.new_token()
        budget = self.settings["budget"] if budget is None else budget
        cooldown = self.settings["cooldown_s"] if cooldown_s is None else cooldown_s
        run = self.state.add_run(run_id, task, source or f"run-{run_id}", agent, model,
                                 budget, float(cooldown), started_at or now_iso("milliseconds"),
                                 auth.token_hash(token), auth.token_hash(final))
        return run, token, final

    def best(self, subs: list[dict[str, Any]], task_id: str) -> dict[str, Any] | None:
        """The best valid score in the task's direction; ties go to the earliest round."""
        task = self.pipe.bench.tasks.get(task_id)
        sign = -1.0 if task is not None and task.score.direction == "minimize" else 1.0
        valid = [s for s in subs if s["result"] and s["result"].get("valid")
                 and isinstance(s["result"].get("score"), int | float)]
        return max(valid, key=lambda s: (sign * s["result"]["score"], -s["round"]),
                   default=None)

    # waiting ------------------------------------------------------------------------
    def _done(self, ids: list[int]) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.wake, ids)

    def wake(self, ids: list[int]) -> None:
        """Wake the long polls waiting on these submissions (call on the event loop)."""
        for sub_id in ids:
            for event in self.waiters.pop(sub_id, []):
                event.set()

    async def wait(self, sub_id: int, timeout: float) -> None:
        """Return when the submission is decided (see `wake`) or `timeout` seconds pass."""
        event = asyncio.Event()
        self.waiters.setdefault(sub_id, []).append(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            events = self.waiters.get(sub_id)
            if events and event in events:
                events.remove(event)
                if not events:
                    self.waiters.pop(sub_id, None)


def remove_own_judges() -> None:
    """Stop the judges this process runs (a stop before they finished): from now on none
    writes a verdict (a judge whose container we removed exits 137, which is no verdict of
    the grader: it was stored as an invalid result for good), then their containers go."""
    try:
        stop_grading()
    except Exception as exc:  # noqa: BLE001 - the next start sweeps them anyway
        log.warning("could not remove this service's judge containers: %s", exc)
