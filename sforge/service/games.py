"""Game sessions: the judge service plays a task's `[game] server_cmd` for a run.

One session is one fresh container from the task's judge image (no network, the judge's
cpus and memory, labelled like a judge so every sweep removes it once its owner is gone),
spoken to over its stdio through Docker's attach API: one JSON request per line in, one
JSON reply per line out (the contract is in edgebench/tasks/SCHEMA.md and the README).

Every step is appended to the session's transcript under
`<results>/<bench>/games/<run_id>/<session>.jsonl` before its reply is returned. When a
session ends (the game says it is over, the agent closes it, a limit, the run's end, a
service stop or restart) sforge reads the game's /opt/sforge/result.json, removes the
container, and records the session as a result of the run: its transcript is stored as
the run's archive (content-addressed, where `sforge report` finds submissions) and the
result is written under that archive's eval key, so scores.csv, best.csv, the leaderboard
and the budgets count games with no step of their own. Only a session whose game is over
can be valid: one ended early keeps its score so far as an invalid result with the reason.
`[judge] cmd` of a game task re-scores such a transcript, should the result ever be graded
again (a new judge image).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import os
import socket
import struct
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from sforge.benchmark.games import TRANSCRIPT, is_game, server_cmd
from sforge.benchmark.model import Task
from sforge.containers import owner
from sforge.containers.engine import EngineError
from sforge.core.config import games_settings
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.contract import container_limits
from sforge.grading.judge import _SETUP, TASK_LABEL, ContainerLimits, _JudgeRun
from sforge.service.state import now_iso

log = logging.getLogger("sforge.service")

GAME_LABEL = "sforge.game.session"
OPEN_STATES = ("starting", "open")
SCHEMA = """
CREATE TABLE IF NOT EXISTS game_sessions (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    task        TEXT NOT NULL,
    idx         INTEGER NOT NULL,   -- 1, 2, ... within the run (SFORGE_SESSION_INDEX)
    state       TEXT NOT NULL,      -- starting | open | finished | ended | failed
    container   TEXT,
    created_at  TEXT NOT NULL,
    created_ts  REAL NOT NULL,
    ended_at    TEXT,
    end_reason  TEXT,
    steps       INTEGER NOT NULL DEFAULT 0,
    hello       TEXT,               -- the game's first line
    transcript  TEXT NOT NULL,      -- the step record (JSON lines)
    result      TEXT,               -- JSON: the session's result once ended
    UNIQUE (run_id, idx)
);
CREATE INDEX IF NOT EXISTS game_sessions_state ON game_sessions (state);
"""


class GameError(Exception):
    """An HTTP answer other than 200: the status, a message, headers, extra JSON fields."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 **extra: Any):
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers, extra


class _Timeout(Exception):
    pass


class GameServer(_JudgeRun):
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
        base = self.spec(())
        self.create_spec(self.spec(
            ("/bin/sh", "-c", _SETUP, "sforge-game", server_cmd(self.task)),
            network="none", stdin=True, keep_output=True,
            env={**base.env, "SFORGE_SESSION": session_id, "SFORGE_SESSION_INDEX": str(index)},
            labels={**owner.labels(), TASK_LABEL: self.task.id, GAME_LABEL: session_id}),
            "creating the game container")

    def attach_and_start(self) -> None:
        try:
            assert self.id is not None
            self._keep, self.sock = self.engine.attach_stdio(self.id)
            self.engine.start(self.id)
        except EngineError as exc:
            raise self._infra("starting the game server", exc) from None

    # the line channel ---------------------------------------------------------------
    def send(self, line: bytes) -> None:
        assert self.sock is not None
        self.sock.sendall(line + b"\n")

    def readline(self, timeout: float) -> bytes | None:
        """The next stdout line (without its newline); None at end of stream (the server
        exited); _Timeout past `timeout`; GameError for a line over the cap."""
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
                raise _Timeout()
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise _Timeout() from None
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
        for thing in (self.sock, self._keep):
            with contextlib.suppress(Exception):
                thing.close()  # type: ignore[union-attr]
        self.sock = self._keep = None


@dataclass
class Session:
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


class GameSessions:
    """The service's game sessions: start, step, status, close, limits, recovery."""

    def __init__(self, service):
        self.service = service
        self.pipe = service.pipe
        self.state = service.state
        self.settings = games_settings(self.pipe.config)
        self.dir = self.pipe.layout.root / "games"
        self.open: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="sforge-games", daemon=True)
        with self.state.lock:
            self.state.db.executescript(SCHEMA)

    @property
    def engine(self):
        from sforge.containers.docker import engine

        return engine()

    def _server(self, task: Task, log_path: Path) -> GameServer:
        """The game container of `task`, bounded by config.yaml's judge_limits as a judge
        is (its session's result is keyed with them)."""
        return GameServer(self.engine, self.pipe.refs[task.id]["judge"].tag, task, log_path,
                          int(self.settings["max_step_bytes"]),
                          container_limits(self.pipe.config))

    # life ---------------------------------------------------------------------------
    def start(self) -> None:
        """End what a previous service left open (before any sweep removes its container
        and, with it, the score so far), then watch the limits."""
        for row in self._rows("SELECT * FROM game_sessions WHERE state IN (?, ?)",
                              *OPEN_STATES):
            try:
                self._recover(row)
            except Exception as exc:  # noqa: BLE001 - one bad row must not stop the service
                log.exception("could not end game session %s: %s", row["id"], exc)
        self._reaper.start()

    def stop(self) -> None:
        """SIGTERM: every open session ends, recorded with its score so far."""
        self.stopping.set()
        if self._reaper.is_alive():
            self._reaper.join(timeout=5)
        for sess in list(self.open.values()):
            with sess.lock:
                if sess.id in self.open:
                    self._end(sess, "ended", "the service stopped")

    def _reap(self) -> None:
        idle, wall = self.settings["idle_timeout_s"], self.settings["max_session_s"]
        while not self.stopping.wait(0.25):
            now = time.time()
            for sess in list(self.open.values()):
                run = self.state.run(sess.run_id) or {}
                if now - sess.created_ts >= wall:
                    why = f"the session's wall clock of {wall:g} s ran out"
                elif now - sess.last_ts >= idle:
                    why = f"idle timeout: no step for {idle:g} s"
                elif run.get("state") != "active":
                    why = f"the run {run.get('state', 'is gone')}"
                else:
                    continue
                if sess.lock.acquire(blocking=False):  # a step in flight ends first
                    try:
                        if sess.id in self.open:
                            self._end(sess, "ended", why)
                    except Exception:  # noqa: BLE001
                        log.exception("could not end game session %s", sess.id)
                    finally:
                        sess.lock.release()

    # database ---------------------------------------------------------------------------
    def _rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        with self.state.lock:
            return [dict(r) for r in self.state.db.execute(sql, args).fetchall()]

    def _exec(self, sql: str, *args: Any) -> None:
        with self.state.lock:
            self.state.db.execute(sql, args)

    def row(self, sid: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM game_sessions WHERE id = ?", sid)
        return rows[0] if rows else None

    # the endpoints' work --------------------------------------------------------------
    def new(self, run: dict[str, Any]) -> dict[str, Any]:
        task = self.pipe.bench.tasks.get(run["task"])
        if task is None:
            raise GameError(409, self.service.gone(run["task"]))
        if not is_game(task):
            raise GameError(409, f"task {run['task']} is not a game (no [game] server_cmd): "
                                 "submit archives with sforge-submit")
        if self.stopping.is_set() or self.service.draining:
            raise GameError(503, "the service is shutting down", {"Retry-After": "10"})
        sid = uuid.uuid4().hex[:12]
        index, transcript = self._claim(run, task, sid)
        try:
            self.service.prepare(task.id)
            server = self._server(task, transcript.with_suffix(".log"))
            server.create_game(sid, index)
        except (InfrastructureError, SforgeError) as exc:
            self._exec("DELETE FROM game_sessions WHERE id = ?", sid)  # spends nothing
            raise GameError(503, f"cannot start the game server: {exc}",
                            {"Retry-After": "10"}) from None
        self._exec("UPDATE game_sessions SET container = ? WHERE id = ?", server.id, sid)
        now = time.time()
        sess = Session(sid, run["run_id"], task, index, server, transcript, now, now,
                       allowance=float(self.settings["steps_per_s"]), bucket_ts=time.monotonic())
        with sess.lock:
            try:
                server.attach_and_start()
                hello = server.readline(float(self.settings["start_timeout_s"]))
            except InfrastructureError as exc:
                self._exec("DELETE FROM game_sessions WHERE id = ?", sid)
                server.close_channel()
                server.remove()
                raise GameError(503, f"cannot start the game server: {exc}",
                                {"Retry-After": "10"}) from None
            except (_Timeout, GameError) as exc:
                why = (f"the game server did not answer within "
                       f"{self.settings['start_timeout_s']:g} s"
                       if isinstance(exc, _Timeout) else str(exc))
                self._end(sess, "failed", why, record=False)
                raise GameError(504 if isinstance(exc, _Timeout) else 502, why,
                                session=self.status(sid)) from None
            if hello is None or not _json(hello):
                why = ("the game server exited before its first line" if hello is None
                       else "the game server's first line is not JSON")
                self._end(sess, "failed", why, record=False)
                raise GameError(502, why, session=self.status(sid))
            sess.fd = os.open(transcript, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(sess.fd, b'{"session":%s,"run":%s,"task":%s,"index":%d,'
                              b'"started_at":%s,"hello":%s}\n' % (
                                  _q(sid), _q(run["run_id"]), _q(task.id), index,
                                  _q(now_iso(now)), hello))
            self._exec("UPDATE game_sessions SET state = 'open', hello = ? WHERE id = ?",
                       hello.decode(), sid)
            self.open[sid] = sess
        return {**self.status(sid), "hello": orjson.loads(hello)}

    def _claim(self, run: dict[str, Any], task: Task, sid: str) -> tuple[int, Path]:
        """The limits and the new row in one transaction: a refusal spends nothing."""
        s = self.settings
        with self.state._tx() as db:
            if db.execute("SELECT state FROM runs WHERE run_id = ?",
                          (run["run_id"],)).fetchone()[0] != "active":
                raise GameError(409, f"run {run['run_id']} is not active")
            mine = db.execute("SELECT count(*), sum(state IN ('starting', 'open')) FROM "
                              "game_sessions WHERE run_id = ?", (run["run_id"],)).fetchone()
            total, open_now = mine[0], mine[1] or 0
            if total >= s["max_sessions_per_run"]:
                raise GameError(429, f"the run's {s['max_sessions_per_run']} game session(s) "
                                     "are spent", reason="sessions")
            if open_now >= s["max_open_per_run"]:
                raise GameError(409, f"the run already has {open_now} open session(s) (at "
                                     f"most {s['max_open_per_run']}): close one first",
                                reason="open sessions")
            busy = db.execute("SELECT count(*) FROM game_sessions WHERE state IN "
                              "('starting', 'open')").fetchone()[0]
            if busy >= s["max_open"]:
                raise GameError(503, f"the service has {busy} game sessions open (at most "
                                     f"{s['max_open']}); retry later", {"Retry-After": "10"},
                                reason="capacity")
            index = total + 1
            transcript = self.dir / run["run_id"] / f"{sid}.jsonl"
            now = time.time()
            db.execute("INSERT INTO game_sessions (id, run_id, task, idx, state, created_at, "
                       "created_ts, transcript) VALUES (?, ?, ?, ?, 'starting', ?, ?, ?)",
                       (sid, run["run_id"], task.id, index, now_iso(now), now,
                        str(transcript)))
        transcript.parent.mkdir(parents=True, exist_ok=True)
        return index, transcript

    def own(self, who_run: dict[str, Any] | None, admin: bool, sid: str) -> dict[str, Any]:
        """The session's row, if this caller may touch it (404 unknown, 403 another run's)."""
        if sid == "current" and who_run is not None:
            rows = self._rows("SELECT * FROM game_sessions WHERE run_id = ? ORDER BY idx DESC "
                              "LIMIT 1", who_run["run_id"])
            if not rows:
                raise GameError(404, "this run has no game session yet (sforge-game new)")
            return rows[0]
        row = self.row(sid)
        if row is None:
            raise GameError(404, f"no game session {sid!r}")
        if not admin and (who_run is None or who_run["run_id"] != row["run_id"]):
            raise GameError(403, "a run token reaches only its own game sessions")
        return row

    def step(self, row: dict[str, Any], body: bytes) -> tuple[bytes, dict[str, Any]]:
        """Send one request, return the game's reply (its bytes) and the session's status."""
        sess = self.open.get(row["id"])
        if sess is None:
            raise self._gone(row["id"])
        if len(body) > self.settings["max_step_bytes"]:
            raise GameError(413, f"request over {self.settings['max_step_bytes']} bytes")
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise GameError(422, f"the request is not JSON: {exc}") from None
        if b"\n" in body or b"\r" in body:
            body = orjson.dumps(value)
        # Steps of one session go one at a time; so does its end (the reaper's, a close).
        # One that finds another in flight is refused at once: waiting, each would hold a
        # service thread (the pool every run's calls share) for as long as the game takes.
        if not sess.lock.acquire(blocking=False):
            if not sess.ending:
                raise GameError(409, "another step of this session is still in progress: "
                                     "send the next one after its reply")
            # a limit, a close or the run's end is ending it: 410 once its end is recorded
            if sess.lock.acquire(timeout=30):
                sess.lock.release()
            raise self._gone(sess.id)
        try:
            if sess.id not in self.open:
                raise self._gone(sess.id)
            self._rate(sess)
            sent = time.time()
            try:
                sess.server.send(body)
                reply = sess.server.readline(float(self.settings["step_timeout_s"]))
            except _Timeout:
                why = f"the game server did not reply within {self.settings['step_timeout_s']:g} s"
                self._end(sess, "failed", why)
                raise GameError(504, why, session=self.status(sess.id)) from None
            except OSError as exc:
                reply = None
                log.warning("game session %s: %s", sess.id, exc)
            if reply is None:
                self._end(sess, "finished", "the game server exited")
                raise GameError(410, "the game server exited: the session is over",
                                session=self.status(sess.id))
            if not _json(reply):
                self._end(sess, "failed", "the game server's reply is not JSON")
                raise GameError(502, "the game server's reply is not JSON",
                                session=self.status(sess.id))
            now = time.time()
            sess.steps += 1
            sess.last_ts = now
            os.write(sess.fd, b'{"step":%d,"sent_at":%s,"replied_at":%s,"request":%s,'
                              b'"reply":%s}\n' % (sess.steps, _q(now_iso(sent)),
                                                  _q(now_iso(now)), body, reply))
            if b'"done"' in reply and _done(reply):
                self._end(sess, "finished", "the game is over")
                return reply, self.status(sess.id)
            return reply, {"id": sess.id, "state": "open", "steps": sess.steps}
        finally:
            sess.lock.release()

    def _rate(self, sess: Session) -> None:
        rate = float(self.settings["steps_per_s"])
        now = time.monotonic()
        sess.allowance = min(rate, sess.allowance + (now - sess.bucket_ts) * rate)
        sess.bucket_ts = now
        if sess.allowance < 1.0:
            wait = (1.0 - sess.allowance) / rate
            raise GameError(429, f"step rate: at most {rate:g} steps per second; wait "
                                 f"{wait:.2f} s", {"Retry-After": str(max(1, round(wait)))},
                            reason="rate", wait_s=round(wait, 3))
        sess.allowance -= 1.0

    def _gone(self, sid: str) -> GameError:
        status = self.status(sid)
        if status["state"] == "starting":
            return GameError(409, "the session is still starting", session=status)
        return GameError(410, f"game session {sid} is {status['state']}: "
                              f"{status.get('end_reason') or 'over'}", session=status)

    def close(self, row: dict[str, Any]) -> dict[str, Any]:
        sess = self.open.get(row["id"])
        if sess is not None:
            with sess.lock:
                if sess.id in self.open:
                    self._end(sess, "ended", "closed by the agent")
        return self.status(row["id"])

    def end_run(self, run_id: str, why: str) -> None:
        """The run is over: its open sessions end now (recorded, score so far)."""
        for sess in [x for x in list(self.open.values()) if x.run_id == run_id]:
            with sess.lock:
                if sess.id in self.open:
                    self._end(sess, "ended", why)

    def status(self, sid: str) -> dict[str, Any]:
        row = self.row(sid) or {}
        out = {k: row.get(k) for k in ("id", "run_id", "task", "state", "created_at",
                                        "ended_at", "end_reason", "steps")}
        out["index"] = row.get("idx")
        out["result"] = json.loads(row["result"]) if row.get("result") else None
        sess = self.open.get(sid)
        if sess is not None:
            now = time.time()
            out["steps"] = sess.steps
            out["idle_left_s"] = round(max(0.0, self.settings["idle_timeout_s"]
                                           - (now - sess.last_ts)), 1)
            out["time_left_s"] = round(max(0.0, self.settings["max_session_s"]
                                           - (now - sess.created_ts)), 1)
        return out

    def sessions(self, run_id: str | None) -> list[dict[str, Any]]:
        rows = self._rows("SELECT id FROM game_sessions " +
                          ("WHERE run_id = ? " if run_id else "") + "ORDER BY created_ts",
                          *([run_id] if run_id else []))
        return [self.status(r["id"]) for r in rows]

    # the end of a session ---------------------------------------------------------------
    def _end(self, sess: Session, state: str, why: str, record: bool = True) -> None:
        """Stop the server, read its score, record the session (call with sess.lock).
        It leaves `open` only once its row says how it ended."""
        sess.ending = True
        grace = 2.0 if state == "finished" else 1.0
        try:
            problem, fields, present, code = sess.server.finish(
                grace, f"\n[sforge] session {state}: {why}")
        except InfrastructureError as exc:
            log.warning("game session %s: %s", sess.id, exc)
            problem, fields, present, code = str(exc), {}, False, None
        if sess.fd >= 0:
            os.close(sess.fd)
            sess.fd = -1
        if state == "finished" and code not in (None, 0) and why == "the game server exited":
            state, why = "failed", f"the game server exited with code {code}"
        result = None
        if record:
            try:
                result = self._record(sess, state, why, problem, fields, present)
            except Exception:  # noqa: BLE001 - the session still ends, its row says so
                log.exception("could not record game session %s", sess.id)
                why += " (sforge could not record its result: see the service log)"
        self._exec("UPDATE game_sessions SET state = ?, ended_at = ?, end_reason = ?, "
                   "steps = ?, result = ? WHERE id = ?", state, now_iso(), why, sess.steps,
                   json.dumps(result) if result else None, sess.id)
        self.open.pop(sess.id, None)

    def _recover(self, row: dict[str, Any]) -> None:
        """A session the previous service left open: read what the game scored so far,
        remove its container, record it ended."""
        task = self.pipe.bench.tasks.get(row["task"])
        transcript = Path(row["transcript"])
        steps = max(0, _count_lines(transcript) - 1)
        if task is None:
            self._exec("UPDATE game_sessions SET state = 'ended', ended_at = ?, "
                       "end_reason = ? WHERE id = ?", now_iso(),
                       "the service restarted (task no longer in the benchmark)", row["id"])
            return
        server = self._server(task, transcript.with_suffix(".log"))
        server.id = row["container"]
        sess = Session(row["id"], row["run_id"], task, row["idx"], server, transcript,
                       row["created_ts"], row["created_ts"], steps=steps)
        if server.id is None:
            self._exec("UPDATE game_sessions SET state = 'ended', ended_at = ?, "
                       "end_reason = ? WHERE id = ?", now_iso(),
                       "the service restarted before the game server started", row["id"])
            return
        self._end(sess, "ended", "the service restarted", record=transcript.is_file())
        log.warning("game session %s was open when the service stopped: ended", row["id"])

    def _record(self, sess: Session, state: str, why: str, problem: str | None,
                fields: dict[str, Any], present: bool) -> dict[str, Any]:
        """The session as a result of its run: transcript archive in the store, eval
        result under its key. The result is written first, so the store never holds a
        session archive without its result."""
        from sforge import __version__
        from sforge.benchmark.submissions import store_archive
        from sforge.grading.results import EvalResult

        task = sess.task
        run = self.state.run(sess.run_id) or {}
        source = run.get("source") or f"run-{sess.run_id}"
        data = _archive(sess.transcript)
        sha = _sha256(data)
        judge = self.pipe.refs[task.id]["judge"].tag
        key = self.pipe.eval_target(task.id, sha, sess.transcript).key
        started = run.get("started_at")
        now = time.time()
        from sforge.service.state import parse_iso

        elapsed = round(now - parse_iso(started), 3) if started else None
        meta = {"elapsed_s": elapsed, "agent": run.get("agent"), "model": run.get("model")}
        if not present and state != "finished":
            # The container is gone (swept after a crash): the score so far is what
            # [judge] cmd makes of the transcript, through the one grading function.
            problem, fields, present = self._replay(task, source, data, now, meta)
        score = fields.get("score")
        valid = bool(fields.get("valid")) and state == "finished" and not problem
        reason = None
        if state != "finished":
            reason = f"session {state} before the game was over: {why}"
            if score is not None:
                reason += f" (score so far {score:g})"
        elif problem or not present:
            reason = problem or "the game server left no /opt/sforge/result.json"
        elif not fields.get("valid"):
            reason = "the game judged the session invalid"
        result = EvalResult(
            task=task.id, submission=sha, key=key, valid=valid, score=score,
            summary=fields.get("summary") or reason or "", details=fields.get("details", []),
            metrics=fields.get("metrics", {}), reason=reason,
            duration_s=round(now - sess.created_ts, 3), started_at=now_iso(sess.created_ts),
            finished_at=now_iso(now), judge_image=judge, judge_settings=task.judge_settings(),
            sforge_version=__version__, log=str(sess.server.log_path))
        result.write(self.pipe.layout.eval_result(task.id, key))
        store_archive(self.pipe.layout.store, source, task.id, io.BytesIO(data),
                      now_iso(now), meta)
        view = self.service.view(result, source)
        return {k: view.get(k) for k in ("valid", "score", "rescaled", "summary", "reason",
                                         "key", "submission", "details", "metrics")}


    def _replay(self, task: Task, source: str, data: bytes, now: float,
                meta: dict[str, Any]) -> tuple[str | None, dict[str, Any], bool]:
        from sforge.benchmark.submissions import store_archive
        from sforge.evals.grade import grade

        try:
            self.service.prepare(task.id)
            sub = store_archive(self.pipe.layout.store, source, task.id, io.BytesIO(data),
                                now_iso(now), meta)
            result = grade(self.pipe, self.pipe.eval_target(task.id, sub.sha256, sub.path))
        except SforgeError as exc:
            log.warning("cannot re-score the transcript of %s: %s", task.id, exc)
            return str(exc), {}, False
        fields = {"valid": result.valid, "score": result.score, "summary": result.summary,
                  "details": result.details, "metrics": result.metrics}
        return None, fields, True


def _archive(transcript: Path) -> bytes:
    """The session's transcript as a submission archive (deterministic bytes)."""
    data = transcript.read_bytes() if transcript.is_file() else b""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(TRANSCRIPT)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def _json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def _done(reply: bytes) -> bool:
    with contextlib.suppress(orjson.JSONDecodeError):
        value = orjson.loads(reply)
        return isinstance(value, dict) and value.get("done") is True
    return False


def _q(text: str) -> bytes:
    return orjson.dumps(text)
