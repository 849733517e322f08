"""A game server: one container from the task's judge image spoken to over its stdio, one
JSON line each way per step; and the open session that plays it."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sforge.benchmark.games import server_cmd
from sforge.benchmark.model import Task
from sforge.containers import owner
from sforge.containers.engine import EngineError
from sforge.grading.judge_container import (
    TASK_LABEL,
    ContainerLimits,
    JudgeRun,
    setup_script,
)

GAME_LABEL = "sforge.game.session"


class GameError(Exception):
    """An HTTP answer other than 200: the status, a message, headers, extra JSON fields."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 **extra: Any):
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers, extra


class StepTimeout(Exception):
    """The game server did not answer in time."""


class GameServer(JudgeRun):
    """One game container: the judge run's create/read/log/remove, plus a stdio line
    channel (Docker's attach stream; stdout frames carry the replies, stderr is the log)."""

    LIVE_LOG = False  # stdout is the protocol channel; the log is read from the daemon

    def __init__(self, engine, image: str, task: Task, log_path: Path, max_line: int,
                 limits: ContainerLimits | None = None):
        super().__init__(engine, image, task, 0.0, log_path, limits)
        self.max_line = max_line
        self.sock: socket.socket | None = None
        self._keep: Any = None      # the SocketIO owning self.sock
        self._raw = bytearray()      # bytes read, not yet framed
        self._out = bytearray()      # stdout payload, not yet a whole line

    def create_game(self, session_id: str, index: int) -> None:
        """Create the session's game container: no network, stdin open, session in its env."""
        base = self.spec(())
        self.create_spec(self.spec(
            ("/bin/sh", "-c", setup_script(self.task.environment.cwd), "sforge-game",
             server_cmd(self.task)),
            network="none", stdin=True, keep_output=True,
            env={**base.env, "SFORGE_SESSION": session_id, "SFORGE_SESSION_INDEX": str(index)},
            labels={**owner.labels(), TASK_LABEL: self.task.id, GAME_LABEL: session_id}),
            "creating the game container")

    def attach_and_start(self) -> None:
        """Attach to the container's stdio, then start it, so no line of the server is lost."""
        try:
            assert self.id is not None
            self._keep, self.sock = self.engine.attach_stdio(self.id)
            self.engine.start(self.id)
        except EngineError as exc:
            raise self.infra_error("starting the game server", exc) from None

    # the line channel ---------------------------------------------------------------
    def send(self, line: bytes) -> None:
        """Send one line to the game server's stdin."""
        assert self.sock is not None
        self.sock.sendall(line + b"\n")

    def readline(self, timeout: float) -> bytes | None:
        """The next stdout line (without its newline); None at end of stream (the server
        exited); StepTimeout past `timeout`; GameError for a line over the cap."""
        deadline = time.monotonic() + timeout
        while True:
            nl = self._out.find(b"\n")
            if nl >= 0:
                line = bytes(self._out[:nl])
                del self._out[:nl + 1]
                return line
            if len(self._out) > self.max_line:
                raise GameError(502, f"the game server wrote a line over {self.max_line} "
                                     "bytes")
            payload = self._frame(deadline)
            if payload is None:
                return None
            self._out += payload

    def _frame(self, deadline: float) -> bytes | None:
        """One stdout frame of the attach stream: 8-byte header (stream, size), payload."""
        if not self._fill(8, deadline):
            return None
        _, size = struct.unpack(">BxxxL", self._raw[:8])
        if not self._fill(8 + size, deadline):
            return None
        payload = bytes(self._raw[8:8 + size])
        del self._raw[:8 + size]
        return payload

    def _fill(self, n: int, deadline: float) -> bool:
        assert self.sock is not None
        while len(self._raw) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StepTimeout()
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise StepTimeout() from None
            except OSError:
                return False
            if not chunk:
                return False
            self._raw += chunk
        return True

    def finish(self, grace_s: float, trailer: str) -> tuple[str | None, dict[str, Any],
                                                             bool, int | None]:
        """Close the server's stdin (EOF), let it exit for up to `grace_s`, read its
        result.json, keep its log, remove the container. → (problem, fields, present,
        exit code or None when it had to be killed)."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)
        exit_code = None
        try:
            if grace_s > 0 and self.id is not None:
                with contextlib.suppress(Exception):
                    exit_code = self.engine.wait(self.id, grace_s)
            with contextlib.suppress(Exception):
                self.engine.kill(self.id or "")  # still running: stop it before reading
            problem, fields, present = self.read_result()
            self.write_log(trailer + (f" (exit code {exit_code})" if exit_code is not None
                                      else " (stopped by sforge)") + "\n")
            return problem, fields, present, exit_code
        finally:
            self.close_channel()
            self.remove()

    def close_channel(self) -> None:
        """Close the stdio channel; safe to call twice or when it never opened."""
        for thing in (self.sock, self._keep):
            with contextlib.suppress(Exception):
                thing.close()  # type: ignore[union-attr]
        self.sock = self._keep = None


@dataclass
class Session:
    """An open game session: its server, transcript, step count, limits' state and lock."""

    id: str
    run_id: str
    task: Task
    index: int
    server: GameServer
    transcript: Path
    created_ts: float
    last_ts: float
    steps: int = 0
    fd: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)
    allowance: float = 0.0       # the step-rate bucket
    bucket_ts: float = 0.0
    ending: bool = False         # being ended (under its lock): steps then get 410
