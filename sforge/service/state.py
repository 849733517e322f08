"""The service's state in one SQLite database (WAL) on the service host's local disk.

Runs (with their token hashes), submissions (each with its round, its place in the queue
and, once graded, its result) and refusal counters. Every change is one transaction, so a
`kill -9` at any moment leaves either the old or the new state; a restart puts the
submissions that were running back in the queue (they are graded again; the judge
container they had is swept). WAL needs a local filesystem: SQLite's locking is not
reliable over NFS, so the service directory must not be on a shared one.

One connection guarded by a lock: every statement is short (no judge runs inside a
transaction), and synchronous=NORMAL in WAL mode keeps each commit durable across a
process crash (an OS crash may lose the last commits, never corrupt the file).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sforge.core.clock import now_iso
from sforge.core.errors import SforgeError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    task        TEXT NOT NULL,
    source      TEXT NOT NULL,
    agent       TEXT,
    model       TEXT,
    budget      INTEGER,            -- non-final submissions allowed (NULL: unlimited)
    cooldown_s  REAL NOT NULL DEFAULT 0,
    started_at  TEXT NOT NULL,      -- ISO 8601: elapsed_s counts from here
    started_ts  REAL NOT NULL,
    created_at  TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'active',   -- active | ended | cancelled
    ended_at    TEXT,
    token_hash  TEXT UNIQUE,        -- sha256 of the run token; NULL once revoked
    -- added below: final_hash, sha256 of sforge's final token, the only one that may
    -- make the run's final submission (NULL once revoked); stored_bytes, the bytes of its
    -- non-final archives accepted
    used        INTEGER NOT NULL DEFAULT 0,       -- non-final submissions accepted
    rounds      INTEGER NOT NULL DEFAULT 0,       -- submissions accepted (the last round)
    last_ts     REAL                -- when the last non-final submission was accepted
);
CREATE TABLE IF NOT EXISTS submissions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL REFERENCES runs(run_id),
    round        INTEGER NOT NULL,
    task         TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    archive      TEXT NOT NULL,
    key          TEXT NOT NULL,     -- the eval key: same key, same result file
    cpus         REAL NOT NULL,     -- [judge] cpus when accepted (a record: a judge holds
                                    -- what sforge.capacity gives for its task now)
    final        INTEGER NOT NULL DEFAULT 0,
    submitted_at TEXT NOT NULL,
    elapsed_s    REAL,
    state        TEXT NOT NULL,     -- queued | running | done | cancelled
    from_store   INTEGER NOT NULL DEFAULT 0,      -- answered by a result graded before
    result       TEXT,              -- JSON, set exactly once (state done)
    attempts     INTEGER NOT NULL DEFAULT 0,
    interrupted  INTEGER NOT NULL DEFAULT 0,      -- judge runs lost to a stop or a crash
    not_before   REAL,              -- retry time after an infrastructure failure
    last_error   TEXT,
    started_at   TEXT,
    finished_at  TEXT,
    UNIQUE (run_id, round)
);
CREATE INDEX IF NOT EXISTS submissions_queue ON submissions (state, id);
CREATE INDEX IF NOT EXISTS submissions_key ON submissions (key);
CREATE INDEX IF NOT EXISTS submissions_run ON submissions (run_id, round);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class Refused(Exception):
    """A submission the run may not make now (HTTP 429): spends nothing."""

    def __init__(self, reason: str, message: str, wait_s: float | None = None):
        super().__init__(message)
        self.reason, self.message, self.wait_s = reason, message, wait_s


class Busy(Exception):
    """The queue is full (HTTP 503 + Retry-After): spends nothing."""


class Conflict(Exception):
    """HTTP 409: a second final submission, a run id taken, a run no longer active."""


@dataclass(frozen=True)
class Limits:
    """What the service admits: pending submissions in all, and stored bytes per run."""
    max_pending: int
    max_run_bytes: int | None = None   # a run's non-final archives, in all


def parse_iso(value: str) -> float:
    """Seconds since the epoch of an ISO 8601 time; a time without zone is taken as UTC."""
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


class State:
    """The service's runs, submissions and counters; every method is safe across threads."""
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.lock = threading.RLock()
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                  timeout=30)
        try:
            self._open()
        except sqlite3.DatabaseError as exc:  # garbage, truncated, a damaged page
            self.db.close()
            raise SforgeError(
                f"{path}: the service's state database is damaged ({exc}): its runs, "
                "tokens and queue cannot be read. Move it aside to start with an empty "
                "state (the runs' archives and results stay where they are).") from None

    def _open(self) -> None:
        found = self.db.execute("PRAGMA quick_check").fetchone()
        if found is None or found[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {found[0] if found else 'no answer'}")
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}
        for column, ddl in (("final_hash", "TEXT"),  # a database made before these
                            ("stored_bytes", "INTEGER NOT NULL DEFAULT 0")):
            if column not in columns:
                self.db.execute(f"ALTER TABLE runs ADD COLUMN {column} {ddl}")
        self.db.execute("CREATE UNIQUE INDEX IF NOT EXISTS runs_final ON runs (final_hash)")

    def close(self) -> None:
        """Close the database; the state object is unusable afterwards."""
        with self.lock:
            self.db.close()

    # helpers ----------------------------------------------------------------------
    def transaction(self) -> _Tx:
        """`with state.transaction() as db:` one BEGIN IMMEDIATE … COMMIT under the lock,
        rolled back on any exception: checks and writes no other caller can interleave."""
        return _Tx(self)

    def _one(self, sql: str, *args: Any) -> sqlite3.Row | None:
        with self.lock:
            return self.db.execute(sql, args).fetchone()

    def _all(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def bump(self, name: str, by: int = 1) -> None:
        """Add `by` to the counter `name` (created at 0), e.g. a refusal of a given reason."""
        with self.lock:
            self.db.execute("INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE "
                            "SET value = value + excluded.value", (name, by))

    def counters(self) -> dict[str, int]:
        """Every counter by name, as `/v1/metrics` reports them."""
        return {r["name"]: r["value"] for r in self._all("SELECT * FROM counters")}

    # start-up ---------------------------------------------------------------------
    def recover(self) -> int:
        """Judges that were running when the service died go back to the queue."""
        with self.transaction() as db:
            cur = db.execute("UPDATE submissions SET state = 'queued', "
                             "interrupted = interrupted + 1, not_before = NULL "
                             "WHERE state = 'running'")
            return cur.rowcount

    # runs ---------------------------------------------------------------------------
    def add_run(self, run_id: str, task: str, source: str, agent: str | None,
                model: str | None, budget: int | None, cooldown_s: float,
                started_at: str, token_hash: str, final_hash: str) -> dict[str, Any]:
        """Register a run and return it; raises Conflict if `run_id` is taken."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise Conflict(f"run {run_id!r} is already registered")
            db.execute("INSERT INTO runs (run_id, task, source, agent, model, budget, "
                       "cooldown_s, started_at, started_ts, created_at, token_hash, "
                       "final_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (run_id, task, source, agent, model, budget, cooldown_s, started_at,
                        parse_iso(started_at), now_iso("milliseconds"), token_hash, final_hash))
        return self.run(run_id) or {}

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run `run_id` as a dict, or None if no such run is registered."""
        row = self._one("SELECT * FROM runs WHERE run_id = ?", run_id)
        return _run(row) if row else None

    def run_by_token(self, token_hash: str) -> tuple[dict[str, Any], bool] | None:
        """(the run, is it the run's final token) of an active token's hash."""
        row = self._one("SELECT * FROM runs WHERE token_hash = ? OR final_hash = ?",
                        token_hash, token_hash)
        return (_run(row), row["final_hash"] == token_hash) if row else None

    def runs(self) -> list[dict[str, Any]]:
        """Every registered run, oldest first."""
        return [_run(r) for r in self._all("SELECT * FROM runs ORDER BY created_at, run_id")]

    def end_run(self, run_id: str, state: str = "ended") -> list[int]:
        """Revoke the run's token; a cancelled run also drops its queued submissions
        (returned, so their waiters can be told)."""
        with self.transaction() as db:
            db.execute("UPDATE runs SET state = ?, ended_at = ?, token_hash = NULL, "
                       "final_hash = NULL WHERE run_id = ? AND state = 'active'",
                       (state, now_iso("milliseconds"), run_id))
            if state != "cancelled":
                return []
            ids = [r[0] for r in db.execute(
                "SELECT id FROM submissions WHERE run_id = ? AND state = 'queued'", (run_id,))]
            db.execute("UPDATE submissions SET state = 'cancelled', finished_at = ? "
                       "WHERE run_id = ? AND state = 'queued'", (now_iso("milliseconds"), run_id))
            return ids

    # submissions --------------------------------------------------------------------
    def check(self, run: dict[str, Any], final: bool, limits: Limits,
              now: float, size: int = 0) -> None:
        """Raise Refused, Conflict or Busy when this run may not submit now (an archive of
        `size` bytes)."""
        with self.lock:
            self._check(self.db, run["run_id"], final, limits, now, size)

    def _check(self, db: sqlite3.Connection, run_id: str, final: bool, limits: Limits,
               now: float, size: int = 0) -> sqlite3.Row:
        run = db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if run is None or run["state"] != "active":
            raise Conflict(f"run {run_id} is {run['state'] if run else 'unknown'}")
        if final:
            if db.execute("SELECT 1 FROM submissions WHERE run_id = ? AND final = 1",
                          (run_id,)).fetchone():
                raise Conflict(f"run {run_id} already has its final submission")
        else:
            if run["budget"] is not None and run["used"] >= run["budget"]:
                raise Refused("budget", f"the run's budget of {run['budget']} submission(s) "
                                        "is spent")
            if run["last_ts"] is not None and run["cooldown_s"]:
                wait = run["last_ts"] + run["cooldown_s"] - now
                if wait > 0:
                    raise Refused("cooldown", f"cooldown: {run['cooldown_s']:g} s between "
                                              f"submissions; wait {wait:.1f} s", wait)
            if limits.max_run_bytes is not None and \
                    run["stored_bytes"] + size > limits.max_run_bytes:
                raise Refused("storage", f"the run's archives would pass "
                                         f"{limits.max_run_bytes} bytes stored "
                                         f"(service.max_run_bytes; {run['stored_bytes']} so "
                                         "far): no more submissions")
        queued = db.execute("SELECT count(*) FROM submissions WHERE state = 'queued'"
                            ).fetchone()[0]
        if queued >= limits.max_pending:
            raise Busy(queued)
        return run

    def accept(self, run_id: str, *, sha256: str, archive: str, key: str, cpus: float,
               final: bool, limits: Limits, now: float,
               result: dict[str, Any] | None, size: int = 0) -> dict[str, Any]:
        """Checks and insert in one transaction: a refusal spends no budget, cooldown or
        round. `result` (already graded under this key) answers it at once."""
        with self.transaction() as db:
            run = self._check(db, run_id, final, limits, now, size)
            rnd = run["rounds"] + 1
            db.execute("UPDATE runs SET rounds = ?, used = used + ?, "
                       "stored_bytes = stored_bytes + ?, "
                       "last_ts = CASE WHEN ? THEN last_ts ELSE ? END WHERE run_id = ?",
                       (rnd, 0 if final else 1, 0 if final else size, final, now, run_id))
            cur = db.execute(
                "INSERT INTO submissions (run_id, round, task, sha256, archive, key, cpus, "
                "final, submitted_at, elapsed_s, state, from_store, result, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, rnd, run["task"], sha256, archive, key, cpus, final,
                 now_iso("milliseconds", now),
                 round(now - run["started_ts"], 3), "done" if result else "queued",
                 bool(result), _dumps(result), now_iso("milliseconds", now) if result else None))
            sub_id = cur.lastrowid
            assert sub_id is not None  # an INSERT sets it
        return self.submission(sub_id) or {}

    def remove_unless_submitted(self, archive: str, files: list[Path]) -> None:
        """Remove `files` (an archive stored for a submission then refused, and its sidecar)
        unless a submission names that archive: checked and removed inside a transaction,
        so no accept of the same archive commits in between."""
        if not files:
            return
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM submissions WHERE archive = ? LIMIT 1",
                          (archive,)).fetchone() is None:
                for path in files:
                    path.unlink(missing_ok=True)

    def submission(self, sub_id: int) -> dict[str, Any] | None:
        """The submission with this id as a dict, or None if there is none."""
        row = self._one("SELECT * FROM submissions WHERE id = ?", sub_id)
        return _sub(row) if row else None

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """A run's submissions in round order: what it has submitted and what each got."""
        return [_sub(r) for r in self._all(
            "SELECT * FROM submissions WHERE run_id = ? ORDER BY round", run_id)]

    def queued(self, now: float, limit: int = 64) -> list[dict[str, Any]]:
        """Up to `limit` queued submissions due by `now` (no retry delay pending), oldest first."""
        return [_sub(r) for r in self._all(
            "SELECT * FROM submissions WHERE state = 'queued' AND "
            "(not_before IS NULL OR not_before <= ?) ORDER BY id LIMIT ?", now, limit)]

    def next_retry(self) -> float | None:
        """When the earliest queued submission falls due (epoch seconds); None: none queued."""
        row = self._one("SELECT min(not_before) FROM submissions WHERE state = 'queued'")
        return row[0] if row else None

    def start(self, sub_id: int) -> None:
        """Mark a submission running and count the attempt, so a restart can requeue it."""
        with self.lock:
            self.db.execute("UPDATE submissions SET state = 'running', started_at = ?, "
                            "attempts = attempts + 1 WHERE id = ?",
                            (now_iso("milliseconds"), sub_id))

    def retry_later(self, sub_id: int, delay_s: float, error: str) -> None:
        """Requeue a running submission after `delay_s`, keeping `error` as the reason it failed."""
        with self.lock:
            self.db.execute("UPDATE submissions SET state = 'queued', not_before = ?, "
                            "last_error = ? WHERE id = ? AND state = 'running'",
                            (time.time() + delay_s, error, sub_id))

    def interrupt(self, sub_id: int) -> None:
        """Requeue a submission whose judge was cut off by shutdown; it is graded again later."""
        with self.lock:
            self.db.execute("UPDATE submissions SET state = 'queued', "
                            "interrupted = interrupted + 1 WHERE id = ? AND state = 'running'",
                            (sub_id,))

    def finish(self, key: str, result: dict[str, Any], graded_by: int | None) -> list[int]:
        """Give the result to every waiting submission with this key (the one judged,
        `graded_by`, and any identical archive queued meanwhile). Exactly once each."""
        with self.transaction() as db:
            ids = [r[0] for r in db.execute(
                "SELECT id FROM submissions WHERE key = ? AND state IN ('queued', 'running')",
                (key,))]
            db.execute("UPDATE submissions SET state = 'done', result = ?, finished_at = ?, "
                       "from_store = (id IS NOT ?), last_error = NULL "
                       "WHERE key = ? AND state IN ('queued', 'running')",
                       (_dumps(result), now_iso("milliseconds"), graded_by, key))
            return ids

    def counts(self) -> dict[str, int]:
        """How many submissions are in each state; every state is present, zero if empty."""
        rows = self._all("SELECT state, count(*) AS n FROM submissions GROUP BY state")
        out = {"queued": 0, "running": 0, "done": 0, "cancelled": 0}
        out.update({r["state"]: r["n"] for r in rows})
        return out


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT under the lock (ROLLBACK on any exception)."""

    def __init__(self, state: State):
        self.state = state

    def __enter__(self) -> sqlite3.Connection:
        self.state.lock.acquire()
        try:
            self.state.db.execute("BEGIN IMMEDIATE")
        except BaseException:  # e.g. the database locked by another program past the
            self.state.lock.release()  # timeout: that call fails, the service goes on
            raise
        return self.state.db

    def __exit__(self, exc_type, *_: object) -> None:
        try:
            self.state.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.state.lock.release()


def _dumps(data: Any) -> str | None:
    return None if data is None else json.dumps(data, allow_nan=False)


def _run(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out.pop("token_hash", None)
    out.pop("final_hash", None)
    out.pop("started_ts", None)
    out.pop("last_ts", None)
    return out


def _sub(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["final"] = bool(out["final"])
    out["from_store"] = bool(out["from_store"])
    out["result"] = json.loads(out["result"]) if out["result"] else None
    return out
