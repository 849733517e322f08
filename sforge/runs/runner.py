"""One agent run on one task: the function the run rule calls.

register with the judge service (a fresh token per attempt) → host sockets (service relay,
model proxy) → work container with the bundle and the helper → agent command, resumed while
time remains → stop (agent done, timeout, token cap, Ctrl-C) → final workspace packed and
graded as the last submission → token revoked → run.json. The container is always removed.

A run that is interrupted (Ctrl-C, SIGTERM from a scheduler) still grades its final workspace
and leaves attempt-<n>.json marked interrupted, but not run.json: its target stays missing, so
making it again starts a fresh attempt with a new token, and its submissions are kept. A
second Ctrl-C abandons the final grading and only removes the container.

A run whose model calls all fail (model_health: no key, a wrong one, an API that is down)
is stopped at once, its workspace not graded (the agent did nothing), and leaves
attempt-<n>.json with state `failed` and the API's status and message as its error, but not
run.json: the job fails, and the same command once the API answers starts a fresh attempt.

A run stopped by any other error (the Docker daemon unreachable, the judge service gone)
leaves attempt-<n>.json with state `failed` and that error, but not run.json, the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sforge import __version__
from sforge.benchmark.games import is_game
from sforge.benchmark.layout import AGENT_LOG, attempt_file
from sforge.build.image import ensure_local
from sforge.containers.docker import engine
from sforge.containers.owner import sweep_stale_containers
from sforge.core.config import games_settings
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_json
from sforge.grading.contract import container_limits
from sforge.grading.results import GRADING_CONTRACT
from sforge.runs.agent_log import CappedLog, keep_log, next_attempt
from sforge.runs.agents import MOUNT, Agent, load_agent
from sforge.runs.bundle import MANIFEST, ensure_bundle
from sforge.runs.container import (
    MODEL_PORT,
    RUN_DIR_LABEL,
    RUN_ID_LABEL,
    RUN_LABEL,
    SOCKET_DIR,
    WorkContainer,
    WorkSpec,
)
from sforge.runs.helper import helper_binary
from sforge.runs.model_health import DEFAULT_FAIL_AFTER, ModelHealth
from sforge.runs.prompt import build_prompt, submit_env
from sforge.runs.proxy import HostSockets, ModelRoute
from sforge.runs.reference import reference_files
from sforge.runs.service import run_service
from sforge.runs.signals import ABORT, STOP, Interrupted, install_signal_handlers
from sforge.runs.spec import RunSpec, run_dir
from sforge.service.client import ServiceClient, ServiceError

PLACEHOLDER_KEY = "sforge-placeholder-key"  # what the container sees instead of an API key
FINAL_WAIT_MARGIN_S = 120
HISTORY_ON_ABORT_S = 5.0  # after a second Ctrl-C: how long the run's history may take
class RunFailed(SforgeError):
    """The run's model API failed every call; its attempt is recorded, its target is not."""


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


class _Run:
    def __init__(self, pipe, spec: RunSpec, task_id: str, repeat: int, output: Path):
        self.pipe = pipe
        self.spec = spec
        self.task = pipe.bench.tasks[task_id]
        self.repeat = repeat
        self.output = output
        self.folder = output.parent
        self.agent: Agent = load_agent(spec.agent)
        self.model = self.agent.model(spec.model)
        self.stop_reason: str | None = None
        self.failure: str | None = None  # why the model API counts as broken
        self.t0 = time.monotonic()

    def should_stop(self) -> bool:
        if self.stop_reason is None:
            if STOP.is_set():
                self.stop_reason = "interrupted"
            elif (self.folder / "cancel").exists():  # `sforge runs --cancel`
                self.stop_reason = "cancelled"
        return self.stop_reason is not None

    def model_route(self, transcript: Path) -> ModelRoute | None:
        api = self.agent.model_api
        if api is None:
            return None
        price = self.agent.price(self.model)
        if self.spec.max_cost is not None and price is None:
            raise SforgeError(f"--max-cost needs a price for model {self.model!r}: add "
                              f"[prices.{self.model}] to {self.agent.path}, or use --max-tokens")

        self.agent.require_key(self.spec.model_api)  # plain Snakemake checks here too

        def on_cap(reason: str) -> None:
            self.stop_reason = self.stop_reason or "cap"

        def on_fail(reason: str) -> None:
            self.failure = reason
            self.stop_reason = self.stop_reason or "model-api"

        upstream = self.spec.model_api or api.url
        fail_after = self.pipe.config.get("run_model_failures", DEFAULT_FAIL_AFTER)
        return ModelRoute(upstream=upstream, key=self.agent.api_key(),
                          key_header=api.key_header, key_prefix=api.key_prefix, price=price,
                          max_tokens=self.spec.max_tokens, max_cost=self.spec.max_cost,
                          transcript=transcript, on_cap=on_cap,
                          health=ModelHealth(upstream, fail_after), on_fail=on_fail)

    def env(self, image_path: str, token: str, deadline: float) -> dict[str, str]:
        agent = self.agent
        path = ":".join(["/opt/sforge/bin", *(f"{MOUNT}/{d}" for d in agent.path_dirs),
                         image_path])
        env = {
            "PATH": path, "HOME": "/root",
            "SFORGE_SERVICE": f"unix://{SOCKET_DIR}/service.sock", "SFORGE_TOKEN": token,
            "SFORGE_AGENT": MOUNT, "SFORGE_PROMPT": f"{SOCKET_DIR}/prompt.md",
            "SFORGE_DEADLINE": str(int(deadline)), "SFORGE_TASK": self.task.id,
            **submit_env(self.task), **agent.env,
        }
        if self.model:
            env["SFORGE_MODEL"] = self.model
        if agent.model_api:
            api = agent.model_api
            env[api.base_url_env] = f"http://127.0.0.1:{MODEL_PORT}{api.base_url_suffix}"
            if api.placeholder_env:
                env[api.placeholder_env] = PLACEHOLDER_KEY
        return env

    def run(self) -> dict[str, Any]:
        spec, task = self.spec, self.task
        if STOP.is_set():  # Snakemake may still start queued jobs after a Ctrl-C
            raise Interrupted(f"run {spec.id} task {task.id} repeat {self.repeat} not started: "
                              "sforge is stopping")
        self.folder.mkdir(parents=True, exist_ok=True)
        attempt = next_attempt(self.folder)
        if (self.folder / "cancel").exists():  # `sforge runs --cancel` before it started
            return self._cancelled(attempt)
        try:
            return self._started(attempt)
        except Interrupted:  # recorded as interrupted, or not started: never a failure
            raise
        except Exception as exc:
            self._record_failure(attempt, exc)
            raise

    def header(self, attempt: int) -> dict[str, Any]:
        """The fields every record of this (run, task, repeat) attempt starts with."""
        spec = self.spec
        return {"run": spec.id, "task": self.task.id, "repeat": self.repeat,
                "attempt": attempt, "agent": spec.agent, "model": self.model,
                "source": spec.source(self.repeat), "timeout_s": spec.timeout_s,
                "host": socket.gethostname(), "slurm_job": os.environ.get("SLURM_JOB_ID")}

    def _record_failure(self, attempt: int, exc: Exception) -> None:
        """A job stopped by an error before its attempt was recorded (the Docker daemon
        unreachable, the judge service gone, ...) leaves attempt-<n>.json with state
        `failed` and the error, not run.json: `sforge runs` shows it failed with why, and
        `sforge run` makes it again. The record holds no rounds or scores (what the attempt
        submitted before the error is not read back). An attempt already recorded
        (interrupted, or failed by the model API) is kept as it is."""
        path = attempt_file(self.folder, attempt)
        if path.exists():
            return
        with contextlib.suppress(OSError):  # the job's own error is the one to report
            atomic_write_json(path, {**self.header(attempt), "ended_at": _iso(_now()),
                                     "state": "failed", "error": str(exc) or type(exc).__name__,
                                     "interrupted": False})

    def _started(self, attempt: int) -> dict[str, Any]:
        spec, task = self.spec, self.task
        bundle = ensure_bundle(self.agent, Path(spec.script) if spec.script else None)
        eng = engine()
        work = self.pipe.refs[task.id]["work"]
        if self.pipe.registry and eng.image_id(work.tag) is None:
            ensure_local(self.pipe, eng, work)  # a cluster node: the work image from the registry
        sweep_stale_containers(eng, RUN_LABEL)  # work containers of runs killed with -9
        started = _now()
        deadline = time.time() + spec.timeout_s
        log_path = self.folder / AGENT_LOG
        transcript = self.folder / "transcript.jsonl"
        route = self.model_route(transcript)
        reference = reference_files(task) if self.agent.reference else None
        record: dict[str, Any] = {**self.header(attempt), "started_at": _iso(started),
                                  **self.provenance(eng, bundle)}
        running = self.folder / "running.json"
        atomic_write_json(running, {**record, "pid": os.getpid(), "host": socket.gethostname()})
        kept = attempt_file(self.folder, attempt, "log")
        linked = keep_log(log_path, kept)
        finished = False
        try:
            out = self._attempt(record, bundle, eng, started, deadline, log_path,
                                transcript, route, reference)
            finished = True
            return out
        finally:
            running.unlink(missing_ok=True)
            (self.folder / "cancel").unlink(missing_ok=True)
            if finished:  # agent.log is this attempt's, the last one
                kept.unlink(missing_ok=True)
            elif not linked:
                with contextlib.suppress(OSError):
                    shutil.copyfile(log_path, kept)

    def _cancelled(self, attempt: int) -> dict[str, Any]:
        """The record of a run cancelled before it started: finished (never redone) with
        `stopped_by: cancelled`, no agent started, nothing submitted or graded."""
        now = _iso(_now())
        record: dict[str, Any] = {
            **self.header(attempt), "started_at": now, "ended_at": now, "elapsed_s": 0.0,
            "state": "done", "error": None, "stopped_by": "cancelled", "timed_out": False,
            "interrupted": False, "exit_code": None, "resumes": 0, "final": None,
            "usage": None, "tokens": None, "model_calls": None, "log": None,
            "transcript": None, **self._summary({})}
        atomic_write_json(attempt_file(self.folder, attempt), record)
        atomic_write_json(self.output, record)
        (self.folder / "cancel").unlink(missing_ok=True)
        return record

    def provenance(self, eng, bundle: Path) -> dict[str, Any]:
        """What made this run, resolved (image ids, not only tags; the bundle's hash): two
        records with the same values ran the same thing."""
        work = self.pipe.refs[self.task.id]["work"].tag
        digest = json.loads((bundle / MANIFEST).read_text()).get("digest")
        return {"work_image": work, "work_image_id": eng.image_id(work),
                "bundle": digest, "sforge_version": __version__,
                "grading_contract": GRADING_CONTRACT}

    def _attempt(self, record, bundle, eng, started, deadline, log_path, transcript,
                 route, reference) -> dict[str, Any]:
        spec, task, attempt = self.spec, self.task, record["attempt"]
        sockets = Path(tempfile.mkdtemp(prefix="sforge-run-"))
        os.chmod(sockets, 0o755)
        host: HostSockets | None = None
        box: WorkContainer | None = None
        failure: str | None = None
        with run_service(self.pipe, spec.service) as service:
            admin = ServiceClient(service.url, service.admin_token)
            # unique even when results/ was wiped while the service kept its state
            service_run = f"{spec.id}.{task.id}.{self.repeat}.a{attempt}.{secrets.token_hex(3)}"
            reg = admin.register(
                task=task.id, run_id=service_run, source=spec.source(self.repeat),
                agent=spec.agent, model=self.model, budget=spec.budget,
                cooldown_s=spec.cooldown_s, started_at=_iso(started))
            # the agent's token; the final token never enters the container while the
            # agent runs (the final submission spends no budget)
            token, final_token = reg["token"], reg["final_token"]
            record["service_run"] = service_run
            try:
                host = HostSockets(sockets, service.url, route)
                host.start()
                (sockets / "prompt.md").write_text(build_prompt(
                    task, (task.dir / "instruction.md").read_text()
                    if (task.dir / "instruction.md").is_file() else "",
                    spec.timeout_s, _iso(datetime.fromtimestamp(deadline, UTC)),
                    spec.budget, spec.cooldown_s, games_settings(self.pipe.config)))
                box = WorkContainer(eng, WorkSpec(
                    image=self.pipe.refs[task.id]["work"].tag, cwd=task.environment.cwd,
                    env={}, helper=_helper(), socket_dir=sockets, bundle=bundle,
                    bundle_mount=MOUNT, cpus=spec.cpus_for(task), memory=spec.memory_for(task),
                    internet=spec.internet_for(task),
                    pids_limit=container_limits(self.pipe.config).pids,
                    labels={RUN_ID_LABEL: service_run, RUN_DIR_LABEL: str(self.folder)}))
                box.start()
                env = self.env(box.image_path(), token, deadline)
                if reference is not None:
                    box.put_archive("/", reference[0])
                    env.update(reference[1])
                record["agent_version"] = self._version(box, env)
                record.update(self._agent_loop(box, env, deadline, log_path, record))
                record["stopped_by"] = self.stop_reason or (
                    "timeout" if record["timed_out"] else "agent")
                box.kill()
                failure = self.failure or (route.health.verdict() if route and route.health
                                           else None)
                # a game run's result is its best finished session: no final workspace; a
                # broken run's workspace is the task's as given
                record["final"] = None if ABORT.is_set() or is_game(task) or failure \
                    else self._final(
                    box, {**env, "SFORGE_TOKEN": final_token},
                    ServiceClient(service.url, token))
            finally:
                if box is not None:
                    box.remove()
                if host is not None:
                    host.stop()
                shutil.rmtree(sockets, ignore_errors=True)
                with contextlib.suppress(Exception):
                    admin.end_run(service_run)
            history = self._history(admin, service, service_run)
        ended = _now()
        judge = self.pipe.refs[task.id]["judge"].tag
        record.update({"judge_image": judge, "judge_image_id": eng.image_id(judge),
                       "api_models": list(route.api_models) if route else []})
        record.update(self._summary(history))
        record.update({
            "ended_at": _iso(ended), "elapsed_s": round((ended - started).total_seconds(), 3),
            "interrupted": self.stop_reason == "interrupted",
            "usage": route.usage.as_dict() if route else None,
            "tokens": route.usage.total_tokens if route else None,
            "model_calls": route.health.as_dict() if route and route.health else None,
            "log": log_path.name, "transcript": transcript.name if route else None,
            "state": "interrupted" if self.stop_reason == "interrupted"
            else "failed" if failure else "done",
            "error": failure,
        })
        atomic_write_json(attempt_file(self.folder, attempt), record)
        where = f"run {spec.id} task {task.id} repeat {self.repeat}"
        if record["interrupted"]:
            raise Interrupted(f"{where} interrupted "
                              f"(attempt {attempt} recorded; run it again to start afresh)",
                              attempt=attempt)
        if failure:
            raise RunFailed(f"{where} failed: {failure} (attempt {attempt} recorded; "
                            "run it again once the model API answers)")
        atomic_write_json(self.output, record)
        return record

    def _version(self, box: WorkContainer, env: dict[str, str]) -> str | None:
        """The agent CLI's version as its `version` script prints it in the container."""
        if not self.agent.version:
            return None
        code, out = box.run(["/bin/sh", "-c", self.agent.version], check=False, env=env,
                            workdir=self.task.environment.cwd)
        text = out.decode(errors="replace").strip()
        return text.splitlines()[-1][:200] if code == 0 and text else None

    def _agent_loop(self, box: WorkContainer, env: dict[str, str], deadline: float,
                    log_path: Path, record: dict[str, Any]) -> dict[str, Any]:
        with log_path.open("ab") as raw:
            log = CappedLog(raw)
            try:
                return self._resumed(box, env, deadline, log, record)
            finally:
                log.close()

    def _resumed(self, box: WorkContainer, env: dict[str, str], deadline: float,
                 log: CappedLog, record: dict[str, Any]) -> dict[str, Any]:
        """The agent's command, then its resume command while it exits early with time left."""
        agent = self.agent
        max_resumes = self.spec.max_resumes if self.spec.max_resumes is not None \
            else agent.max_resumes
        resumes = 0
        script = agent.command
        while True:
            log.write(f"[sforge] {_iso(_now())} starting: "
                      f"{'resume' if resumes else 'command'}\n".encode())
            if not resumes:  # job start → container up, bundle in, prompt written
                record["startup_s"] = round(time.monotonic() - self.t0, 3)
            res = box.exec_agent(script, env, log, deadline, self.should_stop)
            log.write(f"[sforge] {_iso(_now())} agent "
                      f"{'stopped' if res.exit_code is None else f'exited {res.exit_code}'}"
                      "\n".encode())
            if self.failure:  # the reason beside the agent's own complaints
                log.write(f"[sforge] {_iso(_now())} run failed: {self.failure}\n".encode())
            if res.exit_code is None:
                break
            if (agent.resume is None or resumes >= max_resumes or self.should_stop()
                    or time.time() >= deadline - 5):
                break
            resumes += 1
            script = agent.resume
        return {"exit_code": res.exit_code, "resumes": resumes,
                "timed_out": res.exit_code is None and self.stop_reason is None}

    def _history(self, admin: ServiceClient, service, service_run: str) -> dict[str, Any]:
        """The run's submissions as the service recorded them. After a second Ctrl-C the
        service is asked with a short bound: every submission graded by then is kept, and a
        service that does not answer in time leaves the history empty, not the run stuck."""
        if not ABORT.is_set():
            return admin.history(service_run)
        try:
            with ServiceClient(service.url, service.admin_token, timeout=HISTORY_ON_ABORT_S,
                               retry_503=False) as quick:
                return quick.history(service_run)
        except SforgeError:  # the service's errors included
            return {}

    def _final(self, box: WorkContainer, env: dict[str, str],
               client) -> dict[str, Any] | None:
        """Pack what the agent left (the helper, in the restarted container: the agent's
        processes are gone, so `env` may hold the run's final token) and grade it as the
        run's last submission."""
        try:
            box.restart()
            code, out = box.run(["sforge-submit", "--final", "--no-wait"], check=False,
                                env=env, workdir=self.task.environment.cwd)
            text = out.decode(errors="replace")
            found = re.search(r"submission (\d+) \(round", text)
            if code != 0 or not found:
                return {"error": f"sforge-submit --final exited {code}: {text.strip()[-500:]}"}
            sub_id = int(found.group(1))
            deadline = time.monotonic() + self.task.judge.timeout_sec + FINAL_WAIT_MARGIN_S
            sub = client.result(sub_id)
            # short polls: a second Ctrl-C stops waiting at once
            while sub.get("state") in ("queued", "running") and not ABORT.is_set() \
                    and time.monotonic() < deadline:
                sub = client.result(sub_id, wait_s=2)
        except (ServiceError, SforgeError) as exc:
            return {"error": str(exc)}
        if ABORT.is_set() and sub.get("state") in ("queued", "running"):
            return None  # abandoned: a final result is recorded only once graded
        return _brief(sub)

    def _summary(self, history: dict[str, Any]) -> dict[str, Any]:
        subs = history.get("submissions", [])
        sessions = history.get("sessions")  # a game task's: played, not submitted
        best = history.get("best")
        result = (best or {}).get("result") or {}
        out = {"sessions": [_brief_session(s) for s in sessions]} if sessions is not None \
            else {}
        return {
            **out,
            "rounds": len(subs) if sessions is None else len(sessions),
            "submissions": [_brief(s) for s in subs],
            "best_score": result.get("score"),
            "best_rescaled": result.get("rescaled"),
            "best_round": best.get("round") if best else None,
            "direction": self.task.score.direction,
        }


def _brief(sub: dict[str, Any]) -> dict[str, Any]:
    result = sub.get("result") or {}
    return {"id": sub.get("id"), "round": sub.get("round"), "sha256": sub.get("sha256"),
            "key": sub.get("key"),  # the eval key: the report links its result file
            "final": sub.get("final"), "state": sub.get("state"),
            "elapsed_s": sub.get("elapsed_s"), "valid": result.get("valid"),
            "score": result.get("score"), "rescaled": result.get("rescaled"),
            "summary": result.get("summary"), "reason": result.get("reason")}


def _brief_session(sess: dict[str, Any]) -> dict[str, Any]:
    result = sess.get("result") or {}
    return {"id": sess.get("id"), "round": sess.get("index"), "state": sess.get("state"),
            "steps": sess.get("steps"), "end_reason": sess.get("end_reason"),
            "valid": result.get("valid"), "score": result.get("score"),
            "rescaled": result.get("rescaled"), "summary": result.get("summary"),
            "reason": result.get("reason")}


def _helper() -> Path:
    return Path(helper_binary())


def run_target(pipe, spec: RunSpec, task_id: str, repeat: int) -> dict[str, Any]:
    """Make results/<bench>/runs/<run>/<task>/<repeat>/run.json."""
    if task_id not in pipe.bench.tasks:
        raise SforgeError(f"unknown task {task_id}")
    install_signal_handlers()
    output = run_dir(pipe.layout.root, spec.id, task_id, repeat) / "run.json"
    return _Run(pipe, spec, task_id, repeat, output).run()


__all__ = ["RunFailed", "run_target"]
