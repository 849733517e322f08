"""Integration: every EdgeBench sample submission grades to the score its NOTES.md states."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO

pytestmark = pytest.mark.docker

EDGEBENCH = REPO / "edgebench"
ROW = re.compile(r"^\|\s*`(?P<source>[^/`]+)/(?P<task>[^/`]+)/(?P<name>[^`]+)`[^|]*\|"
                 r"\s*(?P<raw>[-0-9.e+]+)[^|]*\|\s*(?P<rescaled>[-0-9.e+]+)\s*\|")


def stated_scores() -> dict[tuple[str, str, str], tuple[float, float]]:
    """(source, task, name) → (raw, rescaled) from each task's NOTES.md table."""
    out = {}
    for notes in sorted((EDGEBENCH / "tasks").glob("*/NOTES.md")):
        for line in notes.read_text().splitlines():
            m = ROW.match(line)
            if m:
                out[(m["source"], m["task"], m["name"])] = (float(m["raw"]),
                                                             float(m["rescaled"]))
    return out


def game_tasks() -> set[str]:
    import tomllib

    return {p.parent.name for p in (EDGEBENCH / "tasks").glob("*/task.toml")
            if "game" in tomllib.loads(p.read_text())}


def players() -> set[tuple[str, str, str]]:
    """A game task's samples are scripted players (players/<source>.sh), not archives:
    they play through the judge service (tests/integration/test_games.py checks their scores)."""
    return {(p.stem, task, f"players/{p.name}") for task in game_tasks()
            for p in (EDGEBENCH / "tasks" / task / "players").glob("*.sh")
            if p.stem in ("reference", "baseline")}


def test_every_sample_is_stated():
    samples = {(p.parent.parent.name, p.parent.name, p.name.removesuffix(".tar.gz"))
               for p in (EDGEBENCH / "submissions").glob("*/*/*.tar.gz")}
    assert samples and samples | players() == set(stated_scores())
    assert game_tasks() and not {t for _, t, _ in samples} & game_tasks()
    tasks = {p.name for p in (EDGEBENCH / "tasks").iterdir() if p.is_dir()}
    for task in tasks:  # a weak baseline and a strong reference per task
        assert any(s == "baseline" and t == task for s, t, _ in samples | players()), task
        assert any(s == "reference" and t == task for s, t, _ in samples | players()), task


@pytest.fixture(scope="module")
def graded(tmp_path_factory, docker_client):
    results = tmp_path_factory.mktemp("eb-results")
    dist = EDGEBENCH / "blobs-src" / "dist"
    subprocess.run([sys.executable, str(EDGEBENCH / "blobs-src" / "make_blobs.py")],
                   check=True, capture_output=True)
    env = {**os.environ, "SFORGE_BLOB_URL": f"file://{dist}"}
    cmd = [sys.executable, "-m", "sforge", "-b", str(EDGEBENCH), "--results", str(results)]
    for step in (["build", "-j", "2"], ["grade", "-j", "2"], ["report"]):
        proc = subprocess.run(cmd + step, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, f"{step}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return results / "edgebench", proc.stdout


def test_samples_grade_to_their_stated_scores(graded):
    import pandas as pd

    root, _ = graded
    scores = pd.read_csv(root / "scores.csv")
    stated = {k: v for k, v in stated_scores().items() if k not in players()}
    assert len(scores) == len(stated)
    for row in scores.itertuples():
        raw, rescaled = stated[(row.source, row.task, row.name)]
        assert row.valid, (row.source, row.task, row.name, row.summary)
        assert math.isclose(row.score, raw, rel_tol=1e-12, abs_tol=1e-9), row
        assert math.isclose(row.rescaled, rescaled, abs_tol=1e-9), row


def test_leaderboard_ranks_reference_over_baseline(graded):
    import pandas as pd

    root, stdout = graded
    board = pd.read_csv(root / "leaderboard.csv").set_index("source")
    assert board.loc["reference", "score"] > board.loc["baseline", "score"]
    assert "reference" in stdout and "baseline" in stdout  # printed to the terminal
    assert (root / "report.html").stat().st_size > 0
    for path in (root / "evals").glob("*/*.json"):
        assert json.loads(path.read_text())["judge_image"].startswith("edgebench.judge.")
