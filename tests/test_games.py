"""Integration: game tasks played through the judge service (real service, real game
containers from EdgeBench's number_guess task)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO

from sforge.service.client import ServiceClient, ServiceError
from sforge.service.launch import start_service

pytestmark = pytest.mark.docker

EDGEBENCH = REPO / "edgebench"
TASK = "number_guess"
PLAYERS = EDGEBENCH / "tasks" / TASK / "players"
# What each scripted player scores in a run's first session (NOTES.md states the same).
REFERENCE_SCORE, BASELINE_SCORE = 15.0, 2.0


def player(name: str):
    spec = importlib.util.spec_from_file_location(f"player_{name}", PLAYERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def game_containers(docker_client, sid: str) -> list:
    return docker_client.containers.list(all=True,
                                         filters={"label": f"sforge.game.session={sid}"})


def register(svc, task: str = TASK) -> tuple[str, ServiceClient]:
    run_id, token = svc.client().register_run(task, f"g{uuid.uuid4().hex[:8]}",
                                              agent="script", model="none")
    return run_id, ServiceClient(svc.address, token, retry_503=False)


def play(client: ServiceClient, name: str) -> tuple[dict, dict]:
    """One session with a scripted player through the Python client → (final reply,
    the session's status)."""
    session: dict = {}

    def new():
        session.update(client.new_game())
        return session["hello"]

    final = player(name).play(new, lambda request: client.step(session["id"], request))
    return final, client.game(session["id"])


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


def test_scripted_players_score_and_land_in_the_tables(svc, setup, docker_client):
    import pandas as pd

    root, config = setup
    run_ref, ref = register(svc)
    final, status = play(ref, "reference")
    assert final["done"] is True and final["score"] == REFERENCE_SCORE
    assert status["state"] == "finished" and status["steps"] == 50
    assert status["result"]["valid"] is True
    assert status["result"]["score"] == REFERENCE_SCORE
    assert status["result"]["rescaled"] == 75.0
    assert game_containers(docker_client, status["id"]) == []
    # every step is in the transcript, the opening line first
    lines = ref.transcript(status["id"])
    assert lines[0]["index"] == 1 and len(lines) == 51
    assert lines[-1]["reply"] == final and lines[1]["request"] == {"guess": 500}
    # a finished session takes no more steps
    with pytest.raises(ServiceError) as gone:
        ref.step(status["id"], {"guess": 1})
    assert gone.value.status == 410
    # a game takes no archives
    with pytest.raises(ServiceError) as refused:
        ref.submit(b"\x1f\x8b not really")
    assert refused.value.status == 409 and "game" in str(refused.value)

    run_base, base = register(svc)
    final, status = play(base, "baseline")
    assert final["score"] == BASELINE_SCORE and status["result"]["valid"] is True
    # a second session, closed half-way: recorded, with its score so far, not valid
    sess = base.new_game()
    assert sess["index"] == 2 and sess["hello"]["rounds"] == 5
    base.step(sess["id"], {"guess": 500})
    closed = base.close_game(sess["id"])
    assert closed["state"] == "ended" and closed["result"]["valid"] is False
    assert "before the game was over" in closed["result"]["reason"]

    # the report's tables count game sessions like submissions
    proc = subprocess.run([sys.executable, "-m", "sforge", "-b", str(EDGEBENCH), "--results",
                           str(root / "results"), "--config", str(config), "report"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = root / "results" / "edgebench"
    scores = pd.read_csv(out / "scores.csv")
    mine = scores[scores.task == TASK].set_index("source")
    assert mine.loc[f"run-{run_ref}", "score"] == REFERENCE_SCORE
    assert bool(mine.loc[f"run-{run_ref}", "valid"])
    assert len(scores[scores.source == f"run-{run_base}"]) == 2
    best = pd.read_csv(out / "best.csv").set_index("source")
    assert best.loc[f"run-{run_ref}", "score"] == REFERENCE_SCORE
    assert best.loc[f"run-{run_ref}", "rescaled"] == 75.0
    assert best.loc[f"run-{run_base}", "score"] == BASELINE_SCORE  # the closed one never wins
    board = pd.read_csv(out / "leaderboard.csv").set_index("source")
    assert board.loc[f"run-{run_ref}", "tasks"] == len(list((EDGEBENCH / "tasks").glob(
        "*/task.toml")))
    # nothing was graded again: the stored result of a session is its score
    for row in scores.itertuples():
        assert json.loads((out / "evals" / TASK / f"{row.key}.json").read_text())["valid"] \
            == row.valid


def test_scripted_player_with_sforge_game_in_the_work_container(svc, setup):
    """What `sforge run --agent script` does with a game task: the player runs in the
    task's work image with no network and reaches the game only through `sforge-game`
    and the service's socket."""
    from sforge.helper import helper_binary

    root, config = setup
    cmd = [sys.executable, "-m", "sforge", "-b", str(EDGEBENCH), "--results",
           str(root / "results"), "--config", str(config)]
    built = subprocess.run(cmd + ["build", "--task", TASK], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    listed = json.loads(subprocess.run(cmd + ["list", "--task", TASK, "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    work = listed["tasks"][0]["work"]
    run_id, client = register(svc)
    script = ("python3 /players/reference.py; echo rc=$?; sforge-game status; "
              "sforge-game step '{\"guess\": 1}'; echo rc=$?; sforge-game list")
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", "sforge.test=games",
         "-v", f"{svc.socket.parent}:/run/sforge", "-v", f"{PLAYERS}:/players:ro",
         "-v", f"{helper_binary()}:/usr/local/bin/sforge-game:ro",
         "-e", "SFORGE_SERVICE=unix:///run/sforge/service.sock",
         "-e", f"SFORGE_TOKEN={client.token}", work, "sh", "-c", script],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    final = json.loads(lines[0])
    assert final["done"] is True and final["score"] == REFERENCE_SCORE
    assert lines[1] == "rc=0" and "rc=1" in lines  # a step after the end: 410, exit 1
    status = json.loads(lines[2])
    assert status["state"] == "finished" and status["result"]["score"] == REFERENCE_SCORE
    assert "finished" in proc.stderr
    assert [s["state"] for s in json.loads(lines[-1])["sessions"]] == ["finished"]


def test_a_run_reaches_only_its_own_sessions(svc):
    _, a = register(svc)
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
    a.close_game(sess["id"])


def test_limits_give_their_errors(setup, tmp_path, docker_client):
    root, _ = setup
    config = tmp_path / "config.yaml"
    config.write_text(f"""submissions: {root / 'none'}
games:
  max_sessions_per_run: 2
  max_open_per_run: 1
  max_open: 2
  idle_timeout_s: 1.5
  max_session_s: 4
  steps_per_s: 3
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
        # capacity of the whole service: a second run's session fills it
        _, b = register(svc)
        b_sess = b.new_game()
        _, c = register(svc)
        with pytest.raises(ServiceError) as full:
            c.new_game()
        assert full.value.status == 503 and full.value.retry_after
        # idle timeout: ended and recorded, never silently gone
        time.sleep(2.5)
        with pytest.raises(ServiceError) as idle:
            a.step(first["id"], {"guess": 500})
        assert idle.value.status == 410 and "idle" in str(idle.value)
        assert a.game(first["id"])["state"] == "ended"
        # the wall clock of a session, even one that keeps stepping
        second = a.new_game()
        assert second["index"] == 2
        deadline = time.monotonic() + 10
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
