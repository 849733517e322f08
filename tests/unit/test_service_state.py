"""Unit: the service's SQLite state (no Docker): rounds, budget, cooldown, queue limit,
results given exactly once, recovery after a crash, tokens stored as hashes."""

from __future__ import annotations

import sqlite3

import pytest

from sforge.core.clock import now_iso
from sforge.service import auth
from sforge.service.state import SCHEMA, Busy, Conflict, Limits, Refused, State
from tests.helpers.benches import copy_bench
from tests.helpers.paths import FIXTURES


@pytest.fixture
def state(tmp_path):
    st = State(tmp_path / "state.sqlite")
    yield st
    st.close()


def add(state, run_id="r", budget=None, cooldown=0.0, token="tok"):
    return state.add_run(run_id, "t", f"run-{run_id}", "a", "m", budget, cooldown,
                         now_iso(), auth.token_hash(token), auth.token_hash(token + "-final"))


def accept(state, run_id="r", key="k1", final=False, now=1000.0, pending=10, result=None):
    return state.accept(run_id, sha256=key * 2, archive=f"/x/{key}", key=key, cpus=1.0,
                        final=final, limits=Limits(pending), now=now, result=result)


def test_tokens_are_hashed_and_revoked(state, tmp_path):
    add(state, token="secret-token")
    raw = sqlite3.connect(tmp_path / "state.sqlite").execute("SELECT * FROM runs").fetchall()
    assert "secret-token" not in repr(raw)
    assert "secret-token-final" not in repr(raw)
    run, final = state.run_by_token(auth.token_hash("secret-token"))
    assert run["run_id"] == "r" and not final
    run, final = state.run_by_token(auth.token_hash("secret-token-final"))
    assert run["run_id"] == "r" and final
    state.end_run("r")
    assert state.run_by_token(auth.token_hash("secret-token")) is None
    assert state.run_by_token(auth.token_hash("secret-token-final")) is None
    with pytest.raises(Conflict):
        add(state, "r")


def test_refusals_spend_no_round_budget_or_cooldown(state):
    add(state, budget=2, cooldown=10)
    assert accept(state, key="a", now=1000)["round"] == 1
    with pytest.raises(Refused) as exc:
        accept(state, key="b", now=1004)
    assert exc.value.reason == "cooldown" and exc.value.wait_s == pytest.approx(6)
    assert accept(state, key="b", now=1010)["round"] == 2
    with pytest.raises(Refused) as exc:
        accept(state, key="c", now=1100)
    assert exc.value.reason == "budget"
    assert accept(state, key="c", final=True, now=1100)["round"] == 3
    with pytest.raises(Conflict):
        accept(state, key="d", final=True, now=1200)
    assert [s["round"] for s in state.history("r")] == [1, 2, 3]


def test_queue_limit(state):
    add(state)
    accept(state, key="a", pending=2)
    accept(state, key="b", pending=2)
    with pytest.raises(Busy):
        accept(state, key="c", pending=2)
    assert state.run("r")["rounds"] == 2


def test_result_given_once_to_every_waiting_copy(state):
    add(state)
    first = accept(state, key="same")
    second = accept(state, key="same")
    other = accept(state, key="other")
    state.start(first["id"])
    done = state.finish("same", {"valid": True, "score": 1.0}, first["id"])
    assert sorted(done) == [first["id"], second["id"]]
    assert state.submission(first["id"])["from_store"] is False
    assert state.submission(second["id"])["from_store"] is True
    assert state.finish("same", {"valid": False}, first["id"]) == []  # never twice
    assert state.submission(first["id"])["result"]["valid"] is True
    assert state.submission(other["id"])["state"] == "queued"


def test_crash_recovery_requeues_running(tmp_path):
    st = State(tmp_path / "s.sqlite")
    add(st)
    sub = accept(st, key="a")
    st.start(sub["id"])
    st.db.close()  # as if killed: no clean shutdown
    again = State(tmp_path / "s.sqlite")
    assert again.recover() == 1
    row = again.submission(sub["id"])
    assert row["state"] == "queued" and row["interrupted"] == 1
    again.close()


def test_admin_token_file_is_private_and_stable(tmp_path):
    path = tmp_path / "svc" / "admin.token"
    token = auth.admin_token(path, env={})
    assert path.stat().st_mode & 0o777 == 0o600
    assert auth.admin_token(path, env={}) == token and len(token) >= 40
    assert auth.admin_token(path, env={"SFORGE_ADMIN_TOKEN": "x"}) == "x"


def test_a_database_from_before_final_tokens_is_upgraded(tmp_path):
    """A state file made before final tokens opens; its runs just have none."""
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA)
    old.execute("INSERT INTO runs (run_id, task, source, budget, started_at, started_ts, "
                "created_at, token_hash) VALUES ('o', 't', 'run-o', NULL, 'x', 0, 'x', 'h')")
    old.commit()
    old.close()
    st = State(path)
    try:
        run, final = st.run_by_token("h")
        assert run["run_id"] == "o" and not final and "final_hash" not in run
    finally:
        st.close()


def test_a_transaction_that_cannot_begin_releases_the_state(tmp_path):
    """Another program holding the database's write lock past the timeout fails that one
    call; the state's lock is let go, so the service goes on once the other lets go (every
    later call, from every thread, waited for ever)."""
    import threading

    st = State(tmp_path / "s.sqlite")
    st.db.execute("PRAGMA busy_timeout=100")
    other = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        st.recover()
    other.execute("ROLLBACK")
    other.close()
    done = threading.Event()
    threading.Thread(target=lambda: (st.counts(), done.set()), daemon=True).start()
    assert done.wait(5), "the state's lock was kept by the failed transaction"
    assert st.recover() == 0
    st.close()


def test_a_submission_refused_at_accept_leaves_no_archive_behind(tmp_path, monkeypatch):
    """The queue can fill between a submission's check and its accept (another run's
    submission in between): the 503 must store nothing, or `sforge report` would count
    the refused archive as one of the run's. An archive an accepted submission stored
    before stays."""
    import gzip
    import io

    from sforge.core.config import user_config
    from sforge.plan.pipeline import Pipeline
    from sforge.service.core import Service

    copy_bench(FIXTURES / "servicebench", tmp_path / "bench")
    pipe = Pipeline.from_config(user_config(None, {"benchmark": str(tmp_path / "bench"),
                                                   "results": str(tmp_path / "results")}))
    service = Service(pipe, max_pending=5)
    run, _, _ = service.register("quick", "r1", None, None, None, None, None, None)
    real = service.state.accept

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise Busy(5)

    def stored() -> list[str]:
        return sorted(p.name for p in pipe.layout.store.rglob("*") if p.is_file())

    archive = gzip.compress(b"not even a tar: stored all the same", mtime=0)
    monkeypatch.setattr(service.state, "accept", full)
    with pytest.raises(Busy):
        service.submit(run, io.BytesIO(archive), False)
    assert stored() == []
    monkeypatch.setattr(service.state, "accept", real)
    service.submit(run, io.BytesIO(archive), False)
    kept = stored()
    assert len(kept) == 2  # the archive and its sidecar
    monkeypatch.setattr(service.state, "accept", full)
    with pytest.raises(Busy):
        service.submit(run, io.BytesIO(archive), False)
    assert stored() == kept
    service.state.close()


@pytest.mark.parametrize("body", [{"cooldown_s": 1e400}, {"cooldown_s": float("nan")},
                                  {"budget": 10**30}])
def test_a_run_of_an_infinite_cooldown_or_an_endless_budget_is_refused(body):
    """Refused as the request's error (422), where they passed and later failed as a 500:
    round(inf) in a refusal's wait, an integer beyond SQLite's."""
    from pydantic import ValidationError

    from sforge.service.run_routes import RunIn

    with pytest.raises(ValidationError):
        RunIn.model_validate({"task": "quick", **body})
    assert RunIn.model_validate({"task": "quick", "cooldown_s": 5, "budget": 3}).budget == 3


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_state_database_is_a_clear_error(tmp_path, damage):
    """A state database that cannot be read is refused with an error naming it and what to
    do (it was a raw traceback), never taken for an empty one."""
    from sforge.core.errors import SforgeError

    path = tmp_path / "s.sqlite"
    st = State(path)
    add(st)
    accept(st)
    st.close()
    data = path.read_bytes()
    path.write_bytes(b"\x00garbage" * 512 if damage == "garbage" else data[:len(data) // 2])
    with pytest.raises(SforgeError, match="state database is damaged.*Move it aside"):
        State(path)
