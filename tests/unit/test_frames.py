"""Unit: `from sforge import load_results` gives the score tables as DataFrames with parsed
times, and the graders' per-test details and metrics (no Docker)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sforge import scores
from sforge.benchmark.layout import Layout
from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.submissions import Submission
from sforge.core.errors import SforgeError
from sforge.grading.results import EvalResult
from tests.helpers import paths

FIXTURE = paths.FIXTURES / "scores_bench"


def make_results(root: Path) -> Path:
    """A results folder as `sforge report` leaves it: two results with feedback."""
    bench = load_benchmark(FIXTURE)
    layout = Layout(root)
    records = []
    odd_details = {"test_a": "PASSED", "test_b": {"status": "FAILED", "message": "1 != 2"}}
    for i, (source, task, score, valid, details, metrics) in enumerate([
        ("alpha", "max_task", 150.0, True,
         [{"name": "case_1", "status": "PASSED", "score": 1.0},
          {"name": "case_2", "status": "FAILED", "score": 0, "message": "wrong answer"},
          "a bare string"],
         {"cases": 2, "peak_mb": 12.5, "note": "fast"}),
        ("beta", "min_task", None, False, odd_details, {}),
    ]):
        sha = hashlib.sha256(str(i).encode()).hexdigest()
        key = sha[:20]
        EvalResult(task=task, submission=sha, key=key, valid=valid, score=score, summary="s",
                   details=details, metrics=metrics,
                   reason=None if valid else "archive exceeds 10000 members",
                   finished_at=f"2026-01-0{i + 1}T10:00:00+00:00").write(
                       layout.eval_result(task, key))
        records.append((Submission(source=source, task=task, name=f"s{i}", path=root / "x",
                                   sha256=sha, submitted_at=f"2026-01-0{i + 1}T09:00:00Z",
                                   elapsed_s=60.0 * i), layout.eval_result(task, key)))
    scores.write_scores(bench, records, layout.scores)
    scores.write_best(bench, layout.scores, layout.best)
    scores.write_leaderboard(bench, layout.best, layout.scores, layout.leaderboard,
                             layout.leaderboard_md, layout.budgets, [1])
    return root


def test_load_results_tables(tmp_path):
    from sforge import load_results  # the documented import

    res = load_results(make_results(tmp_path / "results" / "scoresbench"))
    assert list(res.scores.columns) == list(scores.SCORES_COLUMNS)
    assert len(res.scores) == 2 and pd.api.types.is_string_dtype(res.scores["task"])
    assert isinstance(res.scores["graded_at"].dtype, pd.DatetimeTZDtype)
    assert res.scores["graded_at"].iloc[0] == pd.Timestamp("2026-01-01T10:00:00Z")
    assert isinstance(res.scores["submitted_at"].dtype, pd.DatetimeTZDtype)
    assert isinstance(res.best["graded_at"].dtype, pd.DatetimeTZDtype)
    invalid = res.scores[~res.scores["valid"]]
    assert invalid["reason"].tolist() == ["archive exceeds 10000 members"]
    assert res.best[["source", "task"]].values.tolist() == [["alpha", "max_task"]]
    assert res.leaderboard["source"].tolist() == ["alpha", "beta"]
    assert set(res.budgets["source"]) == {"alpha", "beta"}


def test_details_and_metrics(tmp_path):
    from sforge import load_results

    res = load_results(make_results(tmp_path / "r"))
    d = res.details
    assert list(d.columns) == ["task", "key", "test", "status", "score", "message"]
    alpha = d[d["task"] == "max_task"]
    assert alpha["test"].tolist() == ["case_1", "case_2", "2"]
    assert alpha["status"].tolist() == ["PASSED", "FAILED", ""]
    assert alpha["score"].tolist()[:2] == [1.0, 0.0] and pd.isna(alpha["score"].iloc[2])
    assert alpha["message"].tolist() == ["", "wrong answer", "a bare string"]
    beta = d[d["task"] == "min_task"]  # details given as an object by name
    assert beta[["test", "status", "message"]].values.tolist() == [
        ["test_a", "PASSED", ""], ["test_b", "FAILED", "1 != 2"]]
    # a detail row joins back to the submissions that share its result
    joined = d.merge(res.scores[["key", "source"]], on="key")
    assert set(joined["source"]) == {"alpha", "beta"}
    m = res.metrics
    assert m[m["task"] == "max_task"].set_index("metric")["value"].to_dict() == {
        "cases": 2.0, "peak_mb": 12.5, "note": "fast"}


def test_missing_tables_say_what_to_do(tmp_path):
    from sforge import load_results

    with pytest.raises(SforgeError, match=r"scores\.csv: not found .*sforge report"):
        load_results(tmp_path)


def test_importing_sforge_stays_light():
    """`import sforge` (every CLI start) must not import pandas for load_results' sake."""
    code = "import sys, sforge; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
