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
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from sforge.benchmark.games import is_game
from sforge.benchmark.model import Task
from sforge.containers.docker import engine
from sforge.containers.engine import ContainerEngine
from sforge.core.clock import now_iso
from sforge.core.config import games_settings
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.contract import container_limits
from sforge.service.core import Service
from sforge.service.game_results import record_session
from sforge.service.game_server import GameError, GameServer, Session, StepTimeout

log = logging.getLogger("sforge.service")

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



class GameSessions:
    """The service's game sessions: start, step, status, close, limits, recovery."""

    def __init__(self, service: Service):
        self.service = service
        self.pipe = service.pipe
        self.state = service.state
        self.settings = games_settings(self.pipe.config)
        self.dir = self.pipe.layout.games
        self.open: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="sforge-games", daemon=True)
        with self.state.lock:
            self.state.db.executescript(SCHEMA)

    @property
    def engine(self) -> ContainerEngine:
        """The process's Docker engine."""
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
        """The stored row of game session `sid`, or None if there is none."""
        rows = self._rows("SELECT * FROM game_sessions WHERE id = ?", sid)
        return rows[0] if rows else None

    # the endpoints' work --------------------------------------------------------------
    def new(self, run: dict[str, Any]) -> dict[str, Any]:
        """Open a game session for the run: its server started and greeted; GameError if refused."""
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
            except (StepTimeout, GameError) as exc:
                why = (f"the game server did not answer within "
                       f"{self.settings['start_timeout_s']:g} s"
                       if isinstance(exc, StepTimeout) else str(exc))
                self._end(sess, "failed", why, record=False)
                raise GameError(504 if isinstance(exc, StepTimeout) else 502, why,
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
                                  _q(now_iso("milliseconds", now)), hello))
            self._exec("UPDATE game_sessions SET state = 'open', hello = ? WHERE id = ?",
                       hello.decode(), sid)
            self.open[sid] = sess
        return {**self.status(sid), "hello": orjson.loads(hello)}

    def _claim(self, run: dict[str, Any], task: Task, sid: str) -> tuple[int, Path]:
        """The limits and the new row in one transaction: a refusal spends nothing."""
        s = self.settings
        with self.state.transaction() as db:
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
                       (sid, run["run_id"], task.id, index, now_iso("milliseconds", now), now,
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
            except StepTimeout:
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
                              b'"reply":%s}\n' % (sess.steps, _q(now_iso("milliseconds", sent)),
                                                  _q(now_iso("milliseconds", now)), body, reply))
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
        """End an open session at the agent's request; → its final status."""
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
        """A session's public state; for an open one also its steps and time left."""
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
        """The status of every session, or only the run's, oldest first."""
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
                result = record_session(self.service, sess, state, why, problem, fields, present)
            except Exception:  # noqa: BLE001 - the session still ends, its row says so
                log.exception("could not record game session %s", sess.id)
                why += " (sforge could not record its result: see the service log)"
        self._exec("UPDATE game_sessions SET state = ?, ended_at = ?, end_reason = ?, "
                   "steps = ?, result = ? WHERE id = ?", state, now_iso("milliseconds"), why,
                   sess.steps,
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
                       "end_reason = ? WHERE id = ?", now_iso("milliseconds"),
                       "the service restarted (task no longer in the benchmark)", row["id"])
            return
        server = self._server(task, transcript.with_suffix(".log"))
        server.id = row["container"]
        sess = Session(row["id"], row["run_id"], task, row["idx"], server, transcript,
                       row["created_ts"], row["created_ts"], steps=steps)
        if server.id is None:
            self._exec("UPDATE game_sessions SET state = 'ended', ended_at = ?, "
                       "end_reason = ? WHERE id = ?", now_iso("milliseconds"),
                       "the service restarted before the game server started", row["id"])
            return
        self._end(sess, "ended", "the service restarted", record=transcript.is_file())
        log.warning("game session %s was open when the service stopped: ended", row["id"])


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
