"""The work container of a run: the task's work image with its cpus, memory and cwd, no
network, sforge's Unix sockets and the agent bundle mounted in, and the agent started in it
with `docker exec` so that sforge keeps the wall clock and the workspace.

Why `--network none` and Unix sockets: a container on a Docker `--internal` network has no
internet but still reaches every host service bound to 0.0.0.0 (the bridge gateway, docker0,
the host's own address), so it isolates from the internet, not from the host. Under
`--network none` the container has only its own loopback; the judge service and the model
proxy reach it as Unix sockets in a bind-mounted folder (/run/sforge), and the in-container
helper's `relay` turns a loopback TCP port into that socket for clients that need TCP (a
model CLI's base URL). No iptables, no sudo, and nothing else of the host answers.

The container's main process is that relay (no `sleep` or shell loop needed in the image);
docker-init is PID 1, so killing the container ends every process the agent started. At
the end the container is killed (every process the agent started dies), started again with
just the relay, and the helper packs and submits the final workspace.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sforge.containers.engine import (
    ContainerEngine,
    ContainerSpec,
    EngineError,
    ImageMissing,
    Mount,
)
from sforge.containers.owner import labels as owner_labels
from sforge.core.errors import InfrastructureError
from sforge.core.units import parse_memory
from sforge.grading.judge_container import ContainerLimits

RUN_LABEL = "sforge.run"
RUN_ID_LABEL = "sforge.run.id"    # the run's id at the judge service
RUN_DIR_LABEL = "sforge.run.dir"  # the run's folder: which container is whose
SOCKET_DIR = "/run/sforge"        # bind-mounted host folder: service.sock, model.sock, prompt
HELPER_DIR = "/opt/sforge/bin"    # sforge-submit, sforge-game, sforge-helper (one binary)
MODEL_PORT = 8765                 # the relay's loopback port for the model proxy


@dataclass
class WorkSpec:
    """What the work container is made of: image, environment, mounts and bounds."""
    image: str
    cwd: str
    env: dict[str, str]
    helper: Path                       # the static helper binary on the host
    socket_dir: Path                   # host folder mounted at SOCKET_DIR
    bundle: Path | None = None         # host folder mounted read-only at agents.MOUNT
    bundle_mount: str = "/opt/sforge/agent"
    cpus: float | None = None
    memory: str | None = None
    internet: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    # processes + threads: the agent shares the kernel's process table with the host, the
    # service and other runs, so a fork bomb must end at its container (the judge's bound)
    pids_limit: int = ContainerLimits().pids


class LogSink(Protocol):
    """Where the agent's output goes (a file, or the runner's capped log)."""

    def write(self, data: bytes, /) -> object:
        """Take the next bytes of the agent's output, as they come."""

    def flush(self) -> None:
        """Make what was written visible to people following the log."""


@dataclass
class ExecResult:
    """How an agent exec ended: its exit code (None: stopped first) and its duration."""
    exit_code: int | None   # None: stopped (timeout, cap, Ctrl-C) before it exited
    seconds: float


class WorkContainer:
    """create → start → exec agent (maybe again) → kill → workspace → remove (always)."""

    def __init__(self, engine: ContainerEngine, spec: WorkSpec):
        self.engine = engine
        self.spec = spec
        self.id: str | None = None

    def _infra(self, what: str, exc: Exception) -> InfrastructureError:
        return InfrastructureError(f"work container of {self.spec.image}: {what} failed: {exc}")

    def image_path(self) -> str:
        """The PATH the work image sets (Docker's default without one); its absence is an error."""
        try:
            env = self.engine.image_env(self.spec.image)
        except InfrastructureError as exc:
            raise self._infra("inspecting the image", exc) from None
        if env is None:
            raise InfrastructureError(f"work image {self.spec.image} not found on the Docker "
                                      "daemon (build it: sforge build --task ID)")
        for item in env:
            if item.startswith("PATH="):
                return item[5:]
        return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def start(self) -> None:
        """Create and start the container with its sockets, helper and bundle mounted read-only."""
        s = self.spec
        mounts = [
            # read-only: a host folder; connecting to its sockets needs no write access
            Mount(str(s.socket_dir), SOCKET_DIR, read_only=True),
            Mount(str(s.helper), f"{HELPER_DIR}/sforge-submit", read_only=True),
            Mount(str(s.helper), f"{HELPER_DIR}/sforge-helper", read_only=True),
            Mount(str(s.helper), f"{HELPER_DIR}/sforge-game", read_only=True),
        ]
        if s.bundle is not None:
            mounts.append(Mount(str(s.bundle), s.bundle_mount, read_only=True))
        # The relay is the main process: a loopback port for TCP-only model clients.
        relay = (f"{HELPER_DIR}/sforge-helper", "relay", f"127.0.0.1:{MODEL_PORT}",
                 f"{SOCKET_DIR}/model.sock")
        box = ContainerSpec(
            image=s.image, command=relay, cwd=s.cwd, env=dict(s.env),
            labels={**owner_labels(RUN_LABEL), **s.labels},
            cpus=s.cpus or 0, memory=parse_memory(s.memory) if s.memory else 0,  # 0: unbounded
            network="bridge" if s.internet else "none", init=True,
            drop_caps=False,  # the agent keeps Docker's default capabilities (apt, chown, …)
            no_new_privileges=True, pids=s.pids_limit, keep_output=True, log_max="16m",
            mounts=tuple(mounts), name=s.name)
        try:
            self.id = self.engine.create_container(box)
            self.engine.start(self.id)
        except ImageMissing:
            raise InfrastructureError(f"work image {s.image} not found on the Docker daemon "
                                      "(build it: sforge build --task ID)") from None
        except EngineError as exc:
            raise self._infra("starting", exc) from None

    def run(self, cmd: list[str], check: bool = True, env: dict[str, str] | None = None,
            workdir: str | None = None) -> tuple[int, bytes]:
        """A short command in the running container (setup steps, probes, the final submit)."""
        try:
            eid, stream = self.engine.exec_start(self._cid, cmd, env, workdir, timeout=600)
            out = b"".join(stream)
            code = self.engine.exec_state(eid)["ExitCode"]
        except EngineError as exc:
            raise self._infra(f"exec {cmd[0]}", exc) from None
        if check and code != 0:
            raise InfrastructureError(f"{' '.join(cmd)} failed in the work container "
                                      f"({code}): {out.decode(errors='replace')[-500:]}")
        return code, out

    def put_archive(self, path: str, data: bytes) -> None:
        """Unpack the tar `data` at `path` in the container (the oracle's reference)."""
        try:
            self.engine.put_archive(self._cid, path, data)
        except EngineError as exc:
            raise self._infra(f"copying files to {path}", exc) from None

    def exec_agent(self, script: str, env: dict[str, str], log: LogSink, deadline: float,
                   should_stop: Callable[[], bool]) -> ExecResult:
        """Run `script` with /bin/sh in cwd until it exits, the deadline passes, or
        should_stop() says so; its output goes to `log`. On a stop the container is killed."""
        started = time.monotonic()
        try:
            eid, stream = self.engine.exec_start(self._cid, ["/bin/sh", "-c", script], env,
                                                 self.spec.cwd)
        except EngineError as exc:
            raise self._infra("starting the agent", exc) from None

        def pump() -> None:
            with contextlib.suppress(EngineError, OSError, ValueError):
                for chunk in stream:
                    log.write(chunk)
                    log.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while reader.is_alive():
            if time.time() >= deadline or should_stop():
                self.kill()
                reader.join(10)
                return ExecResult(None, time.monotonic() - started)
            reader.join(0.2)
        try:
            info = self.engine.exec_state(eid)
            if info.get("Running"):  # stream closed early: wait for the process
                while self.engine.exec_state(eid).get("Running"):
                    if time.time() >= deadline or should_stop():
                        self.kill()
                        return ExecResult(None, time.monotonic() - started)
                    time.sleep(0.2)
                info = self.engine.exec_state(eid)
        except EngineError as exc:
            raise self._infra("reading the agent's exit code", exc) from None
        return ExecResult(info.get("ExitCode"), time.monotonic() - started)

    def kill(self) -> None:
        """SIGKILL the container, if started; a daemon error is ignored (remove follows)."""
        if self.id is None:
            return
        with contextlib.suppress(InfrastructureError):
            self.engine.kill(self.id)

    def restart(self) -> None:
        """Start the stopped container again: the agent's processes are gone, its files and
        mounts are not, so the helper can pack the final workspace exactly as the agent's
        own submissions were packed (same files, same archive, same eval key)."""
        try:
            if self.engine.wait(self._cid, 30) is None:
                raise EngineError("it did not stop within 30 s of the kill")
            self.engine.start(self._cid)
        except EngineError as exc:
            raise self._infra("restarting for the final workspace", exc) from None

    def remove(self) -> None:
        """Remove the container, if made, trying three times; never raises."""
        if self.id is None:
            return
        for _ in range(3):
            try:
                self.engine.remove_container(self.id)  # False: gone, or being removed
                return
            except InfrastructureError:
                time.sleep(0.5)

    @property
    def _cid(self) -> str:
        if self.id is None:
            raise InfrastructureError(f"work container of {self.spec.image}: not started")
        return self.id

