"""Integration: game tasks played through the judge service (real service, real game
containers from EdgeBench's number_guess task)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sforge.service.client import ServiceClient, ServiceError
from sforge.service.launch import start_service
from tests.helpers.paths import REPO

pytestmark = pytest.mark.docker

EDGEBENCH = REPO / "edgebench"
TASK = "number_guess"
PLAYERS = EDGEBENCH / "tasks" / TASK / "players"
# What each scripted player scores in a run's first session (NOTES.md states the same).
REFERENCE_SCORE, BASELINE_SCORE = 15.0, 2.0


def game_containers(docker_client, sid: str) -> list:
    return docker_client.containers.list(all=True,
                                         filters={"label": f"sforge.game.session={sid}"})


def register(svc, task: str = TASK) -> tuple[str, ServiceClient]:
    run_id, token = svc.client().register_run(task, f"g{uuid.uuid4().hex[:8]}",
                                              agent="script", model="none")
    return run_id, ServiceClient(svc.address, token, retry_503=False)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, docker_client):
    root = tmp_path_factory.mktemp("games")
    (root / "none").mkdir()  # no batch submissions: only what the runs play
    config = root / "config.yaml"
    config.write_text(f"submissions: {root / 'none'}\n")
    return root, config


@pytest.fixture(scope="module")
def svc(setup):
    """One service for the tests that share it, on loopback and on a Unix socket (what
    work containers with no network reach); clients use the socket."""
    root, config = setup
    handle = start_service(EDGEBENCH, root / "results", port=0,
                           socket=root / "sock" / "service.sock", config=config)
    yield handle
    assert handle.stop() == 0, handle.log.read_text()[-3000:]


def test_sforge_run_plays_the_game_and_lands_in_the_tables(setup, tmp_path, docker_client):
    """`sforge run --agent script` with the scripted players: each run's result is its
    best finished session, no final workspace is graded, and the report's tables count
    the sessions like submissions."""
    import pandas as pd

    root, config = setup
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "sforge", "-b", str(EDGEBENCH), "--results", str(results),
           "--config", str(config)]
    records = {}
    for name, want in (("reference", REFERENCE_SCORE), ("baseline", BASELINE_SCORE)):
        run_id = f"g{name}{uuid.uuid4().hex[:6]}"
        proc = subprocess.run(cmd + ["run", "--agent", "script", "--script",
                                     str(PLAYERS / f"{name}.sh"), "--task", TASK,
                                     "--run-id", run_id, "--timeout", "300"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        out = results / "edgebench" / "runs" / run_id / TASK / "0"
        rec = json.loads((out / "run.json").read_text())
        assert rec["best_score"] == want and rec["final"] is None, rec
        assert [s["state"] for s in rec["sessions"]] == ["finished"]
        assert rec["sessions"][0]["steps"] > 0 and rec["submissions"] == []
        assert f'"score": {int(want)}, "done": true' in (out / "agent.log").read_text()
        records[name] = rec
    ref = records["reference"]
    assert ref["best_rescaled"] == 75.0
    assert game_containers(docker_client, ref["sessions"][0]["id"]) == []

    proc = subprocess.run(cmd + ["report"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = results / "edgebench"
    scores = pd.read_csv(out / "scores.csv")
    assert set(scores.task) == {TASK}  # no batch submissions: only what the runs played
    best = pd.read_csv(out / "best.csv").set_index("source")
    board = pd.read_csv(out / "leaderboard.csv").set_index("source")
    tasks = len(list((EDGEBENCH / "tasks").glob("*/task.toml")))
    for name, want in (("reference", REFERENCE_SCORE), ("baseline", BASELINE_SCORE)):
        source = records[name]["source"]
        row = scores[scores.source == source].iloc[0]
        assert row.valid and row.score == want and row.elapsed_s > 0
        assert best.loc[source, "score"] == want
        assert board.loc[source, "tasks"] == tasks
        assert board.loc[source, "score"] == pytest.approx(best.loc[source, "rescaled"] / tasks)
    # the stored result of a session is its score: nothing was graded again
    for row in scores.itertuples():
        assert json.loads((out / "evals" / TASK / f"{row.key}.json").read_text())["score"] \
            == row.score


def test_scripted_player_with_sforge_game_in_the_work_container(svc, setup):
    """The player in the task's work image with no network reaches the game only through
    `sforge-game` and the service's socket; every step is in the transcript."""
    from sforge.runs.helper import helper_binary

    root, config = setup
    cmd = [sys.executable, "-m", "sforge", "-b", str(EDGEBENCH), "--results",
           str(root / "results"), "--config", str(config)]
    built = subprocess.run(cmd + ["build", "--task", TASK], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    listed = json.loads(subprocess.run(cmd + ["list", "--task", TASK, "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    work = listed["tasks"][0]["work"]
    run_id, client = register(svc)
    script = ("sforge-game step '{\"guess\": 1}'; echo rc=$?; "  # no session yet: refused
              "sh /players/baseline.sh; echo rc=$?; sforge-game status; "
              "sforge-game step '{\"guess\": 1}'; echo rc=$?; sforge-game list")
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", "sforge.test=games",
         "-v", f"{svc.socket.parent}:/run/sforge", "-v", f"{PLAYERS}:/players:ro",
         "-v", f"{helper_binary()}:/usr/local/bin/sforge-game:ro",
         "-e", "SFORGE_SERVICE=unix:///run/sforge/service.sock",
         "-e", f"SFORGE_TOKEN={client.token}", work, "sh", "-c", script],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    early, *lines = proc.stdout.splitlines()
    assert early == "rc=3" and "no game session" in proc.stderr  # refused, not "unreachable"
    final = json.loads(lines[0])
    assert final["done"] is True and final["score"] == BASELINE_SCORE
    assert lines[1] == "rc=0" and "rc=1" in lines  # a step after the end: 410, exit 1
    status = json.loads(lines[2])
    assert status["state"] == "finished" and status["result"]["score"] == BASELINE_SCORE
    assert status["result"]["valid"] is True and status["result"]["rescaled"] == 10.0
    assert "the game is over" in proc.stderr
    assert [s["state"] for s in json.loads(lines[-1])["sessions"]] == ["finished"]
    steps = client.transcript(status["id"])
    assert steps[0]["index"] == 1 and len(steps) == status["steps"] + 1
    assert steps[-1]["reply"] == final and steps[1]["request"] == {"guess": 167}
    with pytest.raises(ServiceError) as refused:  # a game takes no archives
        client.submit(b"\x1f\x8b not really")
    assert refused.value.status == 409 and "game" in str(refused.value)


def test_a_run_reaches_only_its_own_sessions(svc):
    run_a, a = register(svc)
    _, b = register(svc)
    sess = a.new_game()
    for call in (lambda: b.step(sess["id"], {"guess": 1}), lambda: b.game(sess["id"]),
                 lambda: b.close_game(sess["id"]), lambda: b.transcript(sess["id"])):
        with pytest.raises(ServiceError) as denied:
            call()
        assert denied.value.status == 403
    assert [s["id"] for s in b.games()] == []
    admin = svc.client()
    with pytest.raises(ServiceError) as admin_step:
        admin.step(sess["id"], {"guess": 1})
    assert admin_step.value.status == 403  # only the run plays
    assert admin.game(sess["id"])["state"] == "open"
    assert a.step(sess["id"], {"guess": 500})["guesses"] == 1
    with pytest.raises(ServiceError) as unknown:
        ServiceClient(svc.address, "not-a-token").game(sess["id"])
    assert unknown.value.status == 401
    _, other = register(svc, task="knapsack")
    with pytest.raises(ServiceError) as not_game:
        other.new_game()
    assert not_game.value.status == 409
    admin.end_run(run_a)  # the run's end ends its open session, recorded
    ended = admin.game(sess["id"])
    assert ended["state"] == "ended" and ended["end_reason"] == "the run ended"
    assert ended["result"]["valid"] is False


def test_limits_give_their_errors(setup, tmp_path, docker_client):
    root, _ = setup
    config = tmp_path / "config.yaml"
    config.write_text(f"""submissions: {root / 'none'}
games:
  max_sessions_per_run: 2
  max_open_per_run: 1
  max_open: 2
  idle_timeout_s: 2
  max_session_s: 5
  steps_per_s: 3
  max_step_bytes: 1000
""")
    svc = start_service(EDGEBENCH, tmp_path / "results", port=0, config=config)
    try:
        _, a = register(svc)
        first = a.new_game()
        with pytest.raises(ServiceError) as one_open:
            a.new_game()
        assert one_open.value.status == 409
        # step rate: a burst of 3, then 429 with the wait
        for guess in (100, 200, 300):
            a.step(first["id"], {"guess": guess})
        with pytest.raises(ServiceError) as rate:
            a.step(first["id"], {"guess": 400})
        assert rate.value.status == 429 and rate.value.reason == "rate"
        assert 0 < rate.value.wait_s <= 1 and rate.value.retry_after >= 1
        # bad requests: not JSON, too big
        with pytest.raises(ServiceError) as bad:
            a.step_raw(first["id"], b"{not json")
        assert bad.value.status == 422
        with pytest.raises(ServiceError) as big:
            a.step_raw(first["id"], b'{"guess": "%s"}' % (b"9" * 2000))
        assert big.value.status == 413
        # capacity of the whole service: a second run's session fills it
        _, b = register(svc)
        b_sess = b.new_game()
        _, c = register(svc)
        with pytest.raises(ServiceError) as full:
            c.new_game()
        assert full.value.status == 503 and full.value.retry_after
        # idle timeout: ended and recorded, never silently gone
        time.sleep(3)
        with pytest.raises(ServiceError) as idle:
            a.step(first["id"], {"guess": 500})
        assert idle.value.status == 410 and "idle" in str(idle.value)
        assert a.game(first["id"])["state"] == "ended"
        # the wall clock of a session, even one that keeps stepping
        second = a.new_game()
        assert second["index"] == 2
        deadline = time.monotonic() + 15
        with pytest.raises(ServiceError) as wall:
            while time.monotonic() < deadline:
                a.step(second["id"], {"guess": 500})
                time.sleep(0.6)
        assert wall.value.status == 410 and "wall clock" in str(wall.value)
        # the run's sessions are spent
        with pytest.raises(ServiceError) as spent:
            a.new_game()
        assert spent.value.status == 429 and spent.value.reason == "sessions"
        b.close_game(b_sess["id"])
        for sess in (first, second, b_sess):
            assert game_containers(docker_client, sess["id"]) == []
    finally:
        assert svc.stop() == 0, svc.log.read_text()[-3000:]


def binary_round(client: ServiceClient, sid: str) -> dict:
    lo, hi = 1, 1000
    while True:
        reply = client.step(sid, {"guess": (lo + hi) // 2})
        if reply["answer"] == "higher":
            lo = (lo + hi) // 2 + 1
        elif reply["answer"] == "lower":
            hi = (lo + hi) // 2 - 1
        else:
            return reply


def test_kill_9_mid_session_then_restart_ends_it(setup, tmp_path, docker_client):
    root, config = setup
    sock = Path(f"/tmp/sforge-g{uuid.uuid4().hex[:8]}.sock")
    svc = start_service(EDGEBENCH, tmp_path / "results", port=0, socket=sock,
                        config=config)
    try:
        sessions = {}
        for _ in range(2):
            run_id, client = register(svc)
            sess = client.new_game()
            first = binary_round(client, sess["id"])  # round 1 over: 3 points so far
            assert first["score"] == 3
            client.step(sess["id"], {"guess": 500})
            sessions[sess["id"]] = run_id
        svc.kill()
        # One container as the crash left it (unless another sforge swept it meanwhile),
        # one swept: its score so far then comes from re-scoring the transcript.
        gone = list(sessions)[1]
        for c in game_containers(docker_client, gone):
            c.remove(force=True)
        svc = start_service(EDGEBENCH, tmp_path / "results", port=0, socket=sock,
                            config=config)
        admin = svc.client()
        for sid, run_id in sessions.items():
            status = admin.game(sid)
            assert status["state"] == "ended" and "restarted" in status["end_reason"]
            assert status["steps"] == len(admin.transcript(sid)) - 1
            assert status["result"]["valid"] is False
            assert status["result"]["score"] == 3.0, status["result"]
            assert game_containers(docker_client, sid) == []
            # recorded as a result of the run, like any session
            store = tmp_path / "results" / "edgebench" / "submissions" / f"run-{run_id}" / TASK
            assert len(list(store.glob("*.tar.gz"))) == 1
    finally:
        assert svc.stop() == 0, svc.log.read_text()[-3000:]
        sock.unlink(missing_ok=True)
