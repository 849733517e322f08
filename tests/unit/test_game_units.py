"""Unit: what a game task changes outside the service (no Docker): the prompt's preamble,
the config's limits, the game's own scoring and its re-scorer."""

from __future__ import annotations

import importlib.util
import json

import pytest

from sforge.benchmark.games import game_preamble, is_game
from sforge.benchmark.hashing import HashCache
from sforge.benchmark.loader import load_benchmark
from sforge.core.config import games_settings, load_config
from sforge.core.errors import SforgeError
from sforge.runs.prompt import build_prompt
from tests.helpers.paths import REPO

EDGEBENCH = REPO / "edgebench"


@pytest.fixture(scope="module")
def edgebench(tmp_path_factory):
    """The repository's EdgeBench, loaded (its hashes cached in a temporary file)."""
    cache = HashCache(tmp_path_factory.mktemp("cache") / "hashes.json")
    return load_benchmark(EDGEBENCH, cache)


def test_game_prompt_explains_sforge_game_not_submit(edgebench):
    game, other = edgebench.tasks["number_guess"], edgebench.tasks["knapsack"]
    assert is_game(game) and not is_game(other)
    settings = games_settings({"games": {"max_sessions_per_run": 3}})
    text = build_prompt(game, "Play.", 600, "2026-01-01T00:00:00", games=settings)
    assert "sforge-game new" in text and "sforge-game step" in text
    assert "3 session(s)" in text and text.endswith("Play.\n")
    assert "sforge-submit`" not in text.replace("(`sforge-submit` is refused)", "")
    assert game_preamble(game, settings) in text
    plain = build_prompt(other, "Solve.", 600, "2026-01-01T00:00:00", games=settings)
    assert "sforge-submit" in plain and "sforge-game" not in plain


def test_games_limits_are_validated():
    assert games_settings({})["max_open_per_run"] == 1
    with pytest.raises(SforgeError, match=r"\[games.steps_per_s\]"):
        load_config(overrides={"games": {"steps_per_s": 0}}, env={})
    with pytest.raises(SforgeError, match=r"\[games\]"):
        load_config(overrides={"games": {"max_sesions": 2}}, env={})


def game_module():
    path = EDGEBENCH / "tasks" / "number_guess" / "judge" / "game.py"
    spec = importlib.util.spec_from_file_location("number_guess_game", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_rescores_a_transcript_and_refuses_an_unfinished_one(tmp_path, monkeypatch):
    game = game_module()
    monkeypatch.setattr(game, "RESULT", str(tmp_path / "out" / "result.json"))
    live = game.Game(2)
    lines = [{"session": "s", "index": 2, "hello": live.hello()}]
    while not live.done:  # binary search, recording requests and (faked) replies
        lo, hi = game.LOW, game.HIGH
        while True:
            request = {"guess": (lo + hi) // 2}
            reply = live.play(request)
            lines.append({"step": len(lines), "request": request, "reply": {"forged": 1}})
            if reply.get("answer") == "higher":
                lo = request["guess"] + 1
            elif reply.get("answer") == "lower":
                hi = request["guess"] - 1
            else:
                break
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines))
    game.replay(str(transcript))
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["valid"] is True and result["score"] == live.score  # replies not trusted
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines[:10]))
    game.replay(str(transcript))
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["valid"] is False and "before the game is over" in result["summary"]


def test_game_servers_get_the_configured_judge_limits(tmp_path):
    """A game container is bounded by config.yaml's judge_limits, as a judge container is:
    its session's result is keyed with those limits."""
    from sforge.core.config import user_config
    from sforge.plan.pipeline import Pipeline
    from sforge.service.games import GameSessions

    config = user_config(None, {"benchmark": str(EDGEBENCH), "results": str(tmp_path),
                                "judge_limits": {"pids": 77}})
    sessions = GameSessions.__new__(GameSessions)  # only what makes a game server
    sessions.pipe = Pipeline.from_config(config)
    sessions.settings = games_settings(config)
    server = sessions._server(sessions.pipe.bench.tasks["number_guess"], tmp_path / "g.log")
    assert server.spec(()).pids == 77
    assert sessions.pipe.key_limits == {"judge_limits": {"pids": 77}}
