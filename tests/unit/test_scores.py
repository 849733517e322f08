"""Aggregation: eval result files → scores.csv → best.csv → leaderboard, budgets.

The fixture benchmark tests/fixtures/scores_bench has five tasks:
  max_task        maximize, linear 0..200            category alpha
  min_task        minimize, min_linear 100 → 20      category alpha
  piece_task      maximize, piecewise_max (rescale.md worked example)   category beta
  norescale_task  maximize, no rescale table         category beta
  empty_task      maximize, linear 0..1, no category; nobody submits to it
Expected numbers are computed by hand from the formulas.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sforge import scores
from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import Benchmark
from sforge.benchmark.submissions import Submission, record_rows
from sforge.core.errors import SforgeError
from sforge.grading.results import EvalResult
from sforge.scores import cache as score_cache
from sforge.scores import tables as score_tables
from sforge.scores.parts import TablePaths, update_tables
from tests.helpers import paths

FIXTURE = paths.FIXTURES / "scores_bench"
TOL = 1e-9
PW_R30 = 47169682940.0


@dataclass
class Tables:
    scores: pd.DataFrame
    best: pd.DataFrame
    board: pd.DataFrame
    budgets: pd.DataFrame
    out: Path


@dataclass
class World:
    """Eval result files and Submission records, written as sforge would write them."""

    root: Path
    records: list[tuple[Submission, Path]] = field(default_factory=list)
    n: int = 0

    def add(self, source: str, task: str, score: float | None, valid: bool = True, *,
            submitted_at: str | None = None, elapsed_s: float | None = None,
            graded_at: str = "2025-01-01T00:00:00+00:00", sha: str | None = None,
            name: str | None = None, agent: str | None = None, model: str | None = None,
            summary: str = "ok") -> tuple[Submission, Path]:
        self.n += 1
        sha = sha or hashlib.sha256(f"archive {self.n}".encode()).hexdigest()
        key = hashlib.sha256(f"{task} {sha}".encode()).hexdigest()[:20]
        path = self.root / "evals" / task / f"{key}.json"
        if not path.exists():  # identical archives share one result
            EvalResult(task=task, submission=sha, key=key, valid=valid, score=score,
                       summary=summary, reason=None if valid else "grader said no",
                       duration_s=1.5, finished_at=graded_at,
                       judge_image=f"scoresbench.judge.{task}:0123456789ab").write(path)
        sub = Submission(source=source, task=task, name=name or f"sub{self.n:03d}",
                         path=self.root / "subs" / f"{self.n}.tar.gz", sha256=sha,
                         submitted_at=submitted_at, elapsed_s=elapsed_s, agent=agent,
                         model=model)
        self.records.append((sub, path))
        return sub, path

    def run(self, bench: Benchmark, budgets: list[float] | None = None) -> Tables:
        out = self.root / "out"
        scores.write_scores(bench, self.records, out / "scores.csv")
        scores.write_best(bench, out / "scores.csv", out / "best.csv")
        scores.write_leaderboard(bench, out / "best.csv", out / "scores.csv",
                                 out / "leaderboard.csv", out / "leaderboard.md",
                                 out / "budgets.csv", budgets or [2, 4, 6])
        # The per-task path (what `sforge report` runs) makes the very same bytes.
        assert_same_tables(bench, self.records, out, self.root / "by-task", budgets or [2, 4, 6])
        return Tables(scores.read_scores(out / "scores.csv"), scores.read_best(out / "best.csv"),
                      scores.read_leaderboard(out / "leaderboard.csv"),
                      scores.read_budgets(out / "budgets.csv"), out)


TABLES = ("scores.csv", "best.csv", "leaderboard.csv", "leaderboard.md", "budgets.csv")


def table_paths(out: Path) -> TablePaths:
    return TablePaths(*(out / name for name in TABLES))


def tables_by_task(bench: Benchmark, records, out: TablePaths, budgets: list[float]) -> int:
    """The per-task path over these records (keyed by their digest, as no folder holds
    them): → how many tasks it computed."""
    return len(update_tables(bench, out, budgets, None, lambda ids: record_rows(records)).made)


def assert_same_tables(bench: Benchmark, records, chain: Path, out: Path,
                       budgets: list[float]) -> int:
    made = tables_by_task(bench, records, table_paths(out), budgets)
    for name in TABLES:
        assert (out / name).read_bytes() == (chain / name).read_bytes(), name
    return made


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL


def best_of(t: Tables, source: str, task: str) -> pd.Series:
    rows = t.best[(t.best["source"] == source) & (t.best["task"] == task)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def board_row(t: Tables, source: str) -> pd.Series:
    rows = t.board[t.board["source"] == source]
    assert len(rows) == 1
    return rows.iloc[0]


# --------------------------------------------------------------------------- scores.csv
def test_scores_csv_one_row_per_graded_submission(bench, world):
    a1, _ = world.add("A", "max_task", 150.0, agent="claude-code", model="m1",
                      submitted_at="2025-01-01T01:00:00+00:00", elapsed_s=60.0)
    world.add("A", "max_task", 190.0, valid=False)
    world.add("B", "max_task", 150.0, sha=a1.sha256)  # identical archive: shared result file
    world.add("B", "min_task", 30.0)
    world.add("B", "norescale_task", 7.0)
    t = world.run(bench)
    header = (t.out / "scores.csv").read_text().splitlines()[0].split(",")
    assert header == list(scores.SCORES_COLUMNS)
    for col in ("task", "submission", "source", "valid", "score", "rescaled", "summary",
                "direction", "judge_image", "graded_at", "duration_s", "submitted_at",
                "elapsed_s", "agent", "model", "name", "key", "reason"):
        assert col in header
    assert len(t.scores) == 5
    first = t.scores[(t.scores["source"] == "A") & (t.scores["valid"])].iloc[0]
    assert first["submission"] == a1.sha256 and len(first["key"]) == 20
    assert close(first["rescaled"], 100 * (150 - 0) / (200 - 0))
    assert first["direction"] == "maximize" and first["agent"] == "claude-code"
    assert first["graded_at"] == "2025-01-01T00:00:00+00:00" and first["duration_s"] == 1.5
    assert first["submitted_at"] == "2025-01-01T01:00:00+00:00" and first["elapsed_s"] == 60
    assert first["judge_image"] == "scoresbench.judge.max_task:0123456789ab"
    invalid = t.scores[~t.scores["valid"]].iloc[0]
    assert invalid["score"] == 190.0 and math.isnan(invalid["rescaled"])
    assert invalid["reason"] == "grader said no"
    shared = t.scores[t.scores["submission"] == a1.sha256]
    assert len(shared) == 2 and shared["key"].nunique() == 1
    assert set(shared["source"]) == {"A", "B"}
    mn = t.scores[t.scores["task"] == "min_task"].iloc[0]
    assert mn["direction"] == "minimize" and close(mn["rescaled"], 100 * (100 - 30) / (100 - 20))
    nr = t.scores[t.scores["task"] == "norescale_task"].iloc[0]
    assert nr["score"] == 7.0 and math.isnan(nr["rescaled"])  # no table: null, never 0
    assert pd.isna(nr["submitted_at"]) and pd.isna(nr["elapsed_s"]) and pd.isna(nr["agent"])


def test_rescaled_exact_through_the_csv(bench, world):
    world.add("A", "piece_task", 43623268300.0)
    world.add("A", "piece_task", 49702568341.0)
    world.add("A", "piece_task", 6e10)
    world.add("A", "piece_task", -1.0)
    t = world.run(bench)
    got = dict(zip(t.scores["score"], t.scores["rescaled"], strict=True))
    assert close(got[43623268300.0], 20 * 43623268300.0 / PW_R30)
    assert close(got[49702568341.0], 80.0)
    assert close(got[6e10], 100.0)
    assert close(got[-1.0], 0.0)


def test_valid_without_a_score_is_not_ranked(bench, world):
    world.add("A", "max_task", None, valid=True)
    t = world.run(bench)
    assert len(t.scores) == 1 and pd.isna(t.scores["score"].iloc[0])
    assert t.best.empty
    assert board_row(t, "A")["tasks_valid"] == 0


def test_text_stays_text(bench, world):
    world.add("007", "max_task", 10.0, name="NA", agent="null", model="None", summary="NA")
    t = world.run(bench)
    row = t.scores.iloc[0]
    assert (row["source"], row["name"], row["agent"], row["model"], row["summary"]) == (
        "007", "NA", "null", "None", "NA")
    assert board_row(t, "007")["agent"] == "null"


def test_same_inputs_same_bytes_whatever_the_order(bench, world, tmp_path):
    for i in range(30):
        world.add(f"S{i % 3}", ["max_task", "min_task", "piece_task"][i % 3], float(i),
                  valid=i % 4 != 0, elapsed_s=60.0 * i)
    world.run(bench)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.csv")}
    random.Random(3).shuffle(world.records)
    scores.write_scores(bench, world.records, tmp_path / "out" / "scores.csv", cache=False)
    assert (tmp_path / "out" / "scores.csv").read_bytes() == before["scores.csv"]


def test_results_for_tasks_not_in_the_benchmark_are_kept_but_not_ranked(bench, world):
    world.add("A", "ghost_task", 5.0)
    world.add("A", "max_task", 100.0)
    t = world.run(bench)
    ghost = t.scores[t.scores["task"] == "ghost_task"].iloc[0]
    assert pd.isna(ghost["direction"]) and math.isnan(ghost["rescaled"])
    assert list(t.best["task"]) == ["max_task"]
    assert board_row(t, "A")["tasks_valid"] == 1


# --------------------------------------------------------------------------- errors
def test_missing_result_file_raises(bench, world, tmp_path):
    sub, path = world.add("A", "max_task", 1.0)
    path.unlink()
    with pytest.raises(SforgeError, match="eval result missing"):
        scores.write_scores(bench, world.records, tmp_path / "out" / "scores.csv")
    assert not (tmp_path / "out" / "scores.csv").exists()


def test_result_for_another_archive_raises(bench, world, tmp_path):
    sub, path = world.add("A", "max_task", 1.0)
    other = Submission(source="A", task="max_task", name="wrong", path=sub.path,
                       sha256="0" * 64)
    with pytest.raises(SforgeError, match="was paired with A/max_task/wrong"):
        scores.write_scores(bench, [(other, path)], tmp_path / "out" / "scores.csv")


def test_result_for_another_task_raises(bench, world, tmp_path):
    sub, path = world.add("A", "max_task", 1.0)
    other = Submission(source="A", task="min_task", name="x", path=sub.path, sha256=sub.sha256)
    with pytest.raises(SforgeError, match="eval result is for task 'max_task'"):
        scores.write_scores(bench, [(other, path)], tmp_path / "out" / "scores.csv")


def test_broken_result_file_raises_naming_it(bench, world, tmp_path):
    _, path = world.add("A", "max_task", 1.0)
    path.write_text("{not json")
    with pytest.raises(SforgeError, match=f"{path.name}: unreadable eval result"):
        scores.write_scores(bench, world.records, tmp_path / "out" / "scores.csv")
    path.write_text('{"task": "max_task"}')
    with pytest.raises(SforgeError, match="not an eval result"):
        scores.write_scores(bench, world.records, tmp_path / "out" / "scores.csv")


# --------------------------------------------------------------------------- best.csv
def test_best_in_each_direction_and_invalid_never_wins(bench, world):
    world.add("A", "max_task", 50.0)
    world.add("A", "max_task", 120.0, name="good")
    world.add("A", "max_task", 199.0, valid=False)  # better raw, but invalid
    world.add("A", "min_task", 80.0)
    world.add("A", "min_task", 40.0, name="low")
    world.add("A", "min_task", 10.0, valid=False)  # better raw, but invalid
    world.add("A", "min_task", 95.0)
    world.add("B", "max_task", 200.0, valid=False)  # only invalid: no best row
    t = world.run(bench)
    mx = best_of(t, "A", "max_task")
    assert (mx["score"], mx["name"], mx["direction"]) == (120.0, "good", "maximize")
    assert close(mx["rescaled"], 100 * 120 / 200)
    assert (mx["valid_count"], mx["submissions"], mx["category"]) == (2, 3, "alpha")
    mn = best_of(t, "A", "min_task")
    assert (mn["score"], mn["name"], mn["direction"]) == (40.0, "low", "minimize")
    assert close(mn["rescaled"], 100 * (100 - 40) / (100 - 20))
    assert (mn["valid_count"], mn["submissions"]) == (3, 4)
    assert not ((t.best["source"] == "B") & (t.best["task"] == "max_task")).any()
    assert len(t.best) == 2


def test_ties_go_to_the_earliest_submission(bench, world):
    # submitted_at decides, compared as instants: 01:00+02:00 is before 00:30Z
    world.add("T", "max_task", 100.0, name="a-later", submitted_at="2025-01-02T00:30:00+00:00",
              elapsed_s=1.0)
    world.add("T", "max_task", 100.0, name="b-earlier",
              submitted_at="2025-01-02T01:00:00+02:00", elapsed_s=999.0)
    world.add("T", "max_task", 99.0, name="0-worse", submitted_at="2025-01-01T00:00:00+00:00")
    # no submitted_at: elapsed_s decides
    world.add("T", "min_task", 30.0, name="a-second", elapsed_s=900.0)
    world.add("T", "min_task", 30.0, name="z-first", elapsed_s=500.0)
    # neither: graded_at decides
    world.add("T", "piece_task", 1e10, name="a-graded-later",
              graded_at="2025-01-03T00:00:00+00:00")
    world.add("T", "piece_task", 1e10, name="b-graded-first",
              graded_at="2025-01-02T00:00:00+00:00")
    t = world.run(bench)
    assert best_of(t, "T", "max_task")["name"] == "b-earlier"
    assert best_of(t, "T", "min_task")["name"] == "z-first"
    assert best_of(t, "T", "piece_task")["name"] == "b-graded-first"


def test_best_uses_the_benchmark_as_loaded(bench, world, tmp_path):
    """Direction and rescale come from task.toml now, so a stale scores.csv cannot rank."""
    world.add("A", "max_task", 10.0)
    world.add("A", "max_task", 20.0)
    t = world.run(bench)
    stale = t.scores.assign(direction="minimize", rescaled=0.0)
    stale.to_csv(t.out / "scores.csv", index=False)
    scores.write_best(bench, t.out / "scores.csv", t.out / "best.csv")
    row = scores.read_best(t.out / "best.csv").iloc[0]
    assert row["score"] == 20.0 and close(row["rescaled"], 10.0)


# --------------------------------------------------------------------------- leaderboard
def test_leaderboard_mean_over_every_task_and_categories(bench, world):
    world.add("A", "max_task", 100.0, agent="agent-a", model="m")  # 50
    world.add("A", "min_task", 20.0)  # 100
    world.add("A", "piece_task", 49702568341.0)  # 80
    world.add("A", "norescale_task", 5.0)  # valid, but no table: counts 0
    world.add("B", "max_task", 180.0, valid=False)  # only invalid: 0 everywhere
    world.add("C", "max_task", 200.0)  # 100
    world.add("C", "max_task", 10.0)
    t = world.run(bench)
    assert list(t.board.columns) == ["rank", "source", "agent", "model", "score", "alpha",
                                     "beta", "uncategorized", "tasks_valid", "tasks"]
    assert list(t.board["source"]) == ["A", "C", "B"]
    assert list(t.board["rank"]) == [1, 2, 3]
    a, b, c = board_row(t, "A"), board_row(t, "B"), board_row(t, "C")
    assert close(a["score"], (50 + 100 + 80 + 0 + 0) / 5)
    assert close(a["alpha"], (50 + 100) / 2) and close(a["beta"], (80 + 0) / 2)
    assert close(a["uncategorized"], 0.0)
    assert (a["tasks_valid"], a["tasks"], a["agent"], a["model"]) == (4, 5, "agent-a", "m")
    assert close(b["score"], 0.0) and b["tasks_valid"] == 0
    assert close(c["score"], 100 / 5) and close(c["alpha"], 50.0) and close(c["beta"], 0.0)
    md = (t.out / "leaderboard.md").read_text()
    assert "# Leaderboard: scoresbench" in md and "| A " in md and "46.00" in md
    assert "counts 0" in md
    text = scores.leaderboard_text(t.out / "leaderboard.csv")
    assert text.splitlines()[0].startswith("|") and "46.00" in text and "| C " in text


def test_equal_scores_share_a_rank(bench, world):
    world.add("A", "max_task", 100.0)
    world.add("B", "max_task", 100.0)
    world.add("C", "max_task", 20.0)
    t = world.run(bench)
    assert list(t.board["rank"]) == [1, 1, 3]
    assert list(t.board["source"]) == ["A", "B", "C"]


def test_category_named_like_a_column_is_prefixed(tmp_path):
    root = tmp_path / "b"
    (root / "tasks").mkdir(parents=True)
    (root / "benchmark.toml").write_text('name = "b"\n')
    for tid, cat in (("t1", "score"), ("t2", "games")):
        d = root / "tasks" / tid
        for sub in ("environment", "judge"):
            (d / sub).mkdir(parents=True)
            (d / sub / "Dockerfile").write_text("FROM scratch\n")
        (d / "task.toml").write_text(f'id = "{tid}"\ncategory = "{cat}"\n[judge]\ncmd = "x"\n'
                                     '[score]\nrescale = { kind = "linear", lower = 0.0, '
                                     "upper = 10.0 }\n")
    b = load_benchmark(root)
    assert scores.category_columns(b) == {"games": "games", "score": "category:score"}
    w = World(tmp_path / "w")
    w.add("A", "t1", 5.0)
    t = w.run(b)
    row = board_row(t, "A")
    assert close(row["score"], 25.0) and close(row["category:score"], 50.0)
    assert close(row["games"], 0.0)


# --------------------------------------------------------------------------- budgets
def test_budgets_best_so_far_within_each_time_budget(bench, world):
    h = 3600.0
    world.add("A", "max_task", 40.0, elapsed_s=1 * h)  # 20
    world.add("A", "max_task", 160.0, elapsed_s=3 * h)  # 80
    world.add("A", "max_task", 190.0, valid=False, elapsed_s=3.5 * h)  # invalid
    world.add("A", "min_task", 60.0, elapsed_s=5 * h)  # 50
    world.add("A", "min_task", 20.0, elapsed_s=7 * h)  # beyond every budget
    world.add("A", "max_task", 200.0)  # no elapsed time: leaderboard only
    world.add("D", "max_task", 200.0)  # a source without times: no budget rows
    t = world.run(bench, budgets=[6, 2, 4, 4])
    assert list(t.budgets.columns) == ["source", "budget_h", "score", "tasks_valid"]
    assert list(t.budgets["source"]) == ["A", "A", "A"]
    assert list(t.budgets["budget_h"]) == [2.0, 4.0, 6.0]
    assert [round(x, 9) for x in t.budgets["score"]] == [20 / 5, 80 / 5, (80 + 50) / 5]
    assert list(t.budgets["tasks_valid"]) == [1, 1, 2]
    # the leaderboard itself uses every submission
    assert close(board_row(t, "A")["score"], (100 + 100) / 5)
    md = (t.out / "leaderboard.md").read_text()
    assert "## Time budgets" in md
    assert re.search(r"\|\s+source\s+\|\s+2h\s+\|\s+4h\s+\|\s+6h\s+\|", md)
    assert re.search(r"\|\s+A\s+\|\s+4\.00\s+\|\s+16\.00\s+\|\s+26\.00\s+\|", md)


def test_budgets_default_and_bad_values(bench, world, tmp_path):
    world.add("A", "max_task", 40.0, elapsed_s=100.0)
    out = tmp_path / "out"
    scores.write_scores(bench, world.records, out / "scores.csv")
    scores.write_best(bench, out / "scores.csv", out / "best.csv")
    scores.write_leaderboard(bench, out / "best.csv", out / "scores.csv", out / "lb.csv",
                             out / "lb.md", out / "budgets.csv")
    assert list(scores.read_budgets(out / "budgets.csv")["budget_h"]) == [2, 4, 6, 8, 10, 12]
    for bad in ([0], [-2], [math.nan], [math.inf]):
        with pytest.raises(SforgeError, match="positive hours"):
            scores.write_leaderboard(bench, out / "best.csv", out / "scores.csv",
                                     out / "lb.csv", out / "lb.md", out / "budgets.csv", bad)


# --------------------------------------------------------------------------- empty
def test_no_submissions_still_gives_valid_files(bench, world):
    t = world.run(bench)
    for name, cols in (("scores.csv", scores.SCORES_COLUMNS), ("best.csv", scores.BEST_COLUMNS),
                       ("budgets.csv", scores.BUDGETS_COLUMNS)):
        lines = (t.out / name).read_text().splitlines()
        assert lines == [",".join(cols)], name
    assert t.board.empty
    assert list(t.board.columns) == ["rank", "source", "agent", "model", "score", "alpha",
                                     "beta", "uncategorized", "tasks_valid", "tasks"]
    assert "No graded submissions yet." in (t.out / "leaderboard.md").read_text()
    assert scores.leaderboard_text(t.out / "leaderboard.csv") == "No graded submissions yet."


# --------------------------------------------------------------------------- parse cache
def test_parse_cache_skips_unchanged_files_and_sees_changes(bench, world, tmp_path,
                                                             monkeypatch):
    for i in range(5):
        world.add("A", "max_task", 10.0 * i)
    _, changed = world.add("A", "max_task", 20.0, name="later")
    out = tmp_path / "out" / "scores.csv"
    scores.write_scores(bench, world.records, out)
    first = out.read_bytes()
    assert (tmp_path / "out" / ".cache").is_dir()

    real = score_cache._parse_result
    calls: list[str] = []

    def counting(path: str):  # type: ignore[no-untyped-def]
        calls.append(path)
        return real(path)

    monkeypatch.setattr(score_cache, "_parse_result", counting)
    scores.write_scores(bench, world.records, out)
    assert calls == [] and out.read_bytes() == first

    result = EvalResult.read(changed)
    result.score = 190.0
    result.write(changed)  # regraded: atomic write, new file
    scores.write_scores(bench, world.records, out)
    assert calls == [str(changed)]
    table = scores.read_scores(out)
    assert table.loc[table["name"] == "later", "score"].item() == 190.0
    assert close(table.loc[table["name"] == "later", "rescaled"].item(), 95.0)

    # cache=False parses everything and agrees with the cached run
    calls.clear()
    scores.write_scores(bench, world.records, tmp_path / "nocache.csv", cache=False)
    assert len(calls) == 6 and (tmp_path / "nocache.csv").read_bytes() == out.read_bytes()


def test_corrupt_cache_is_ignored(bench, world, tmp_path):
    world.add("A", "max_task", 10.0)
    out = tmp_path / "out" / "scores.csv"
    scores.write_scores(bench, world.records, out)
    first = out.read_bytes()
    shards = list((tmp_path / "out" / ".cache").rglob("*.json"))
    assert shards
    for cache in shards:
        cache.write_text("{garbage")
    scores.write_scores(bench, world.records, out)
    assert out.read_bytes() == first


# --------------------------------------------------------------------------- CSV writer
def test_csv_writer_is_byte_identical_to_pandas():
    texts = ["plain", "a,b", 'q"uote', "new\nline", "cr\rx", "", None, "ünïcødé ✓", " pad ",
             "NA", "null", "'single'", "tab\there", '"', ",", "0012"]
    floats = [0.1 + 0.2, 1e22, 1e-300, -0.0, math.nan, math.inf, -math.inf,
              123456789.123456789, 5e-324, 2.0, -17.5, 1e16, 43623268300.0, 18.496316100105634,
              1 / 3, 100.0]
    n = len(texts)
    df = pd.DataFrame({
        "text": pd.Series(texts, dtype="str"),
        "x": pd.Series(floats, dtype="float64"),
        "flag": pd.Series([i % 3 == 0 for i in range(n)], dtype=bool),
        "count": pd.Series(range(-3, n - 3), dtype="int64"),
        "a,b": pd.Series(list(reversed(texts)), dtype="str"),
    })
    ours = scores.csv_text(df)
    # The one intended difference: pandas leaves "\r" bare and then misreads its own file.
    assert ours == df.to_csv(index=False, lineterminator="\n").replace('cr\rx', '"cr\rx"')
    empty = df.iloc[0:0]
    assert scores.csv_text(empty) == empty.to_csv(index=False, lineterminator="\n")
    one = df[["text"]]
    assert scores.csv_text(one) == one.to_csv(index=False, lineterminator="\n")


def test_summary_with_newlines_and_carriage_returns_round_trips(bench, world):
    world.add("A", "max_task", 10.0, summary='line 1\nline 2\r\n 3, "quoted"\rprogress 50%')
    world.add("A", "max_task", 20.0, summary="plain")
    t = world.run(bench)
    assert len(t.scores) == 2
    assert set(t.scores["summary"]) == {'line 1\nline 2\r\n 3, "quoted"\rprogress 50%',
                                        "plain"}


def test_csv_round_trip_is_exact(tmp_path):
    raws = [0.1 + 0.2, 1e-300, 43623268300.0, 18.496316100105634, 1 / 3, -0.0, 5e-324]
    df = pd.DataFrame({"task": pd.Series(["0012"] * len(raws), dtype="str"),
                       "score": pd.Series(raws, dtype="float64")})
    path = tmp_path / "t.csv"
    score_tables.write_csv(df, path)
    back = scores.read_table(path, {"task": "str", "score": "float64"})
    assert list(back["task"]) == ["0012"] * len(raws)
    assert [x.hex() for x in back["score"]] == [x.hex() for x in raws]


def test_parse_cache_rewrites_only_the_changed_directory(bench, world, tmp_path):
    world.add("A", "max_task", 10.0)
    _, changed = world.add("A", "max_task", 20.0)
    world.add("A", "min_task", 50.0)
    out = tmp_path / "out" / "scores.csv"
    scores.write_scores(bench, world.records, out)
    shards = {p: p.stat().st_ino for p in (tmp_path / "out" / ".cache").rglob("*.json")}
    assert len(shards) == 2  # one per evals/<task>/ directory
    result = EvalResult.read(changed)
    result.score = 30.0
    result.write(changed)
    scores.write_scores(bench, world.records, out)
    rewritten = {p for p, ino in shards.items() if p.stat().st_ino != ino}
    assert len(rewritten) == 1 and "max_task" in rewritten.pop().read_text()
    # a directory no longer aggregated loses its cache file
    scores.write_scores(bench, [r for r in world.records if r[0].task == "min_task"], out)
    assert len(list((tmp_path / "out" / ".cache").rglob("*.json"))) == 1


# --------------------------------------------------------------------------- fast paths
def test_ranking_sidecar_reads_as_the_csv_and_only_for_that_csv(bench, world):
    for i in range(12):
        world.add(f"S{i % 3}", ["max_task", "min_task", "ghost_task"][i % 3], float(i),
                  valid=i % 4 != 0, elapsed_s=None if i % 5 == 0 else 60.0 * i,
                  agent=None if i % 2 else "a,b", summary='x"y\nz')
    t = world.run(bench)
    path = t.out / "scores.csv"
    assert score_tables._sidecar_path(path).is_file()
    fast = scores.read_scores(path, scores.RANKING_COLUMNS)
    slow = scores.read_table(path, scores.SCORES_COLUMNS, scores.RANKING_COLUMNS)
    pd.testing.assert_frame_equal(fast, slow)
    assert score_tables._read_sidecar(path, scores.RANKING_COLUMNS) is not None
    path.write_bytes(path.read_bytes())  # rewritten by something else: the sidecar is stale
    assert score_tables._read_sidecar(path, scores.RANKING_COLUMNS) is None
    pd.testing.assert_frame_equal(scores.read_scores(path, scores.RANKING_COLUMNS), slow)


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1" + "0" * 30])
def test_json_that_only_python_reads_still_aggregates(bench, world, tmp_path, raw):
    _, path = world.add("A", "max_task", 1.0)
    path.write_text(path.read_text().replace('"score": 1.0', f'"score": {raw}'))
    out = tmp_path / "out" / "scores.csv"
    for _ in range(2):  # parsed, then from the parse cache
        scores.write_scores(bench, world.records, out)
        got = scores.read_scores(out)["score"].iloc[0]
        want = float(raw.replace("Infinity", "inf"))
        assert (math.isnan(got) and math.isnan(want)) or got == want


def test_no_agent_is_an_empty_cell_not_nan(bench, world):
    """A source without agent or model shows blanks in leaderboard.md and on the terminal."""
    world.add("A", "max_task", 100.0, agent="agent-a", model="m")
    world.add("B", "max_task", 50.0)  # no sidecar: no agent, no model
    t = world.run(bench)
    md = (t.out / "leaderboard.md").read_text()
    text = scores.leaderboard_text(t.out / "leaderboard.csv")
    for out in (md, text):
        assert "nan" not in out.lower(), out
        row = next(line for line in out.splitlines() if "| B " in line)
        assert [c.strip() for c in row.strip("|").split("|")][2:4] == ["", ""], row


def test_statuses_named_by_benchmark_toml_are_left_out(tmp_path, world):
    """benchmark.toml's [leaderboard] exclude_status leaves those tasks out of every mean and
    count; sforge itself gives `status` no meaning (no table: every task counts)."""
    import shutil

    root = tmp_path / "bench"
    shutil.copytree(FIXTURE, root)
    toml = root / "tasks" / "min_task" / "task.toml"
    toml.write_text(toml.read_text().replace('id = "min_task"',
                                             'id = "min_task"\nstatus = "broken"'))
    world.add("A", "max_task", 100.0)  # 50
    world.add("A", "min_task", 20.0)  # 100, but min_task is broken
    plain = world.run(load_benchmark(root))
    assert plain.board["tasks"].tolist() == [5] and close(plain.board["score"][0], 150 / 5)
    (root / "benchmark.toml").write_text('name = "scoresbench"\n\n[leaderboard]\n'
                                         'exclude_status = ["broken", "draft"]\n')
    bench = load_benchmark(root)
    assert bench.exclude_status == ("broken", "draft") and list(bench.ranked_tasks) == [
        "empty_task", "max_task", "norescale_task", "piece_task"]
    t = world.run(bench)
    a = board_row(t, "A")
    assert (a["tasks"], a["tasks_valid"]) == (4, 1) and close(a["score"], 50 / 4)
    assert close(a["alpha"], 50.0)  # the category mean leaves min_task out too
    assert "Not ranked" in (t.out / "leaderboard.md").read_text()
    assert "min_task" in set(t.best["task"])  # still graded and in best.csv


def test_per_task_tables_redo_only_the_changed_task(bench, world, tmp_path):
    world.add("A", "max_task", 150.0, elapsed_s=60.0, agent="x")
    _, changed = world.add("B", "max_task", 120.0, elapsed_s=7300.0)
    world.add("A", "min_task", 40.0, elapsed_s=600.0)
    world.add("B", "piece_task", PW_R30, model="m")
    world.add("A", "norescale_task", 3.0)
    out = tmp_path / "parts"
    assert tables_by_task(bench, world.records, table_paths(out), [2, 4]) == 4
    assert tables_by_task(bench, world.records, table_paths(out), [2, 4]) == 0
    assert tables_by_task(bench, world.records, table_paths(out), [2]) == 4  # budgets changed
    result = EvalResult.read(changed)
    result.score = 199.0
    result.write(changed)  # a regraded result: a new file
    chain = tmp_path / "chain"
    scores.write_scores(bench, world.records, chain / "scores.csv", cache=False)
    scores.write_best(bench, chain / "scores.csv", chain / "best.csv")
    scores.write_leaderboard(bench, chain / "best.csv", chain / "scores.csv",
                             chain / "leaderboard.csv", chain / "leaderboard.md",
                             chain / "budgets.csv", [2])
    assert assert_same_tables(bench, world.records, chain, out, [2]) == 1
    assert best_of(world.run(bench, [2]), "B", "max_task")["score"] == 199.0
    # a submission gone from one task redoes that task alone
    assert tables_by_task(bench, world.records[1:], table_paths(out), [2]) == 1


def test_per_task_tables_redo_all_when_scores_csv_is_not_theirs(bench, world, tmp_path):
    """The parts keep their rows as places in the scores.csv written with them: once that
    file is written by anything else (or is gone), every part is computed again."""
    world.add("A", "max_task", 150.0, elapsed_s=60.0, agent="x")
    world.add("B", "min_task", 40.0, elapsed_s=600.0)
    world.add("B", "piece_task", PW_R30, model="m")
    out = tmp_path / "parts"
    assert tables_by_task(bench, world.records, table_paths(out), [2]) == 3
    want = {name: (out / name).read_bytes() for name in TABLES}
    scores.write_scores(bench, world.records[:1], out / "scores.csv", cache=False)
    assert tables_by_task(bench, world.records, table_paths(out), [2]) == 3
    assert {name: (out / name).read_bytes() for name in TABLES} == want
    (out / "scores.csv").unlink()
    assert tables_by_task(bench, world.records, table_paths(out), [2]) == 3
    assert tables_by_task(bench, world.records, table_paths(out), [2]) == 0
    assert {name: (out / name).read_bytes() for name in TABLES} == want


def test_tables_of_many_tasks_made_in_worker_processes_are_those_of_one_pass(
        bench, world, tmp_path, monkeypatch):
    """A cold report computes runs of tasks in forked workers (sforge.core.forking): the same
    bytes in every table as one pass over all tasks, and the same rows handed on."""
    from sforge.core import forking
    from sforge.scores import parts as score_parts

    if forking.usable_cores() < 2:
        pytest.skip("needs two cores for worker processes")
    monkeypatch.setattr(forking, "threading", SimpleNamespace(active_count=lambda: 1))
    g = random.Random(5)
    for i in range(60):
        task = ("max_task", "min_task", "piece_task", "norescale_task")[i % 4]
        raw = PW_R30 if task == "piece_task" else round(g.uniform(1, 200), 2)
        world.add("ABC"[i % 3], task, raw, elapsed_s=60.0 * i if i % 2 else None,
                  agent=f"a{i % 2}", valid=i % 7 != 0)
    pids = tmp_path / "pids"
    pids.mkdir()
    real = score_parts._make_parts

    def make(*a, **k):  # type: ignore[no-untyped-def]
        (pids / str(os.getpid())).touch()
        return real(*a, **k)

    monkeypatch.setattr(score_parts, "_make_parts", make)
    made = {}
    for name, per in (("one", 10**6), ("workers", 1)):
        monkeypatch.setattr(score_parts, "TASKS_PER_PROCESS", per)
        out = tmp_path / name
        assert tables_by_task(bench, world.records, table_paths(out), [1, 2]) == 4
        made[name] = {t: (out / t).read_bytes() for t in TABLES}
    assert made["workers"] == made["one"]
    assert {int(p.name) for p in pids.iterdir()} - {os.getpid()}


def test_reading_results_does_not_import_pandas():
    """Grading reads stored results through sforge.scores.cache; only the tables need
    pandas (most of a second to import), so a grade that makes no table never loads it."""
    import subprocess
    import sys

    code = ("import sys, sforge.scores.cache, sforge.scores.folders; "
            "assert 'pandas' not in sys.modules, 'pandas imported'; "
            "from sforge.scores import write_scores, read_results; "
            "assert 'pandas' in sys.modules and callable(write_scores)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_result_directories_read_in_worker_processes_as_in_one(tmp_path, monkeypatch):
    """Many result directories are read in forked workers (sforge.core.forking): the same fields
    in the same order, the same cache shards, unreadable files handed to on_unreadable in
    the caller, and a broken file without on_unreadable raised naming it."""
    from sforge.core import forking
    from sforge.core.forking import usable_cores

    if usable_cores() < 2:
        pytest.skip("needs two cores for worker processes")
    # Earlier tests of this pytest process leave idle threads behind, which keep
    # fork_map serial; `sforge report` itself has none.
    monkeypatch.setattr(forking, "threading", SimpleNamespace(active_count=lambda: 1))
    paths = []
    for d in range(6):
        for i in range(3):
            sha = hashlib.sha256(f"{d}:{i}".encode()).hexdigest()
            path = tmp_path / "evals" / f"t{d}" / f"{sha[:20]}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            EvalResult(task=f"t{d}", submission=sha, key=sha[:20], valid=True,
                       score=float(d * 10 + i), summary="ok").write(path)
            paths.append(str(path))
    broken = paths[7]
    Path(broken).write_text("{not json")

    def read(cache: Path, per: int):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(score_cache, "DIRS_PER_PROCESS", per)
        bad: list[tuple[str, str]] = []
        got = score_cache.read_results(paths, cache, on_unreadable=lambda p, w: bad.append((p, w)))
        return got, bad, {p.name: p.read_bytes() for p in sorted(cache.glob("*.json"))}

    pids = tmp_path / "pids"
    pids.mkdir()
    real = score_cache._parse_result

    def parse(path):  # type: ignore[no-untyped-def]
        (pids / str(os.getpid())).touch()
        return real(path)

    serial = read(tmp_path / "serial", 10**6)
    monkeypatch.setattr(score_cache, "_parse_result", parse)
    parallel = read(tmp_path / "parallel", 1)
    assert parallel == serial
    assert list(parallel[0]) == [p for p in paths if p != broken]
    assert [p for p, _ in parallel[1]] == [broken]
    assert len(parallel[2]) == 6
    assert {int(p.name) for p in pids.iterdir()} - {os.getpid()}
    with pytest.raises(SforgeError, match=re.escape(broken)):
        score_cache.read_results(paths, None)
    # Tolerant, a file that is not there (graded anew, moved away) is left out, not raised.
    gone = paths[3]
    Path(gone).unlink()
    bad = []
    got = score_cache.read_results(paths, tmp_path / "serial",
                                   on_unreadable=lambda p, w: bad.append(p))
    assert gone not in got and broken not in got and bad == [broken]
    assert len(got) == len(paths) - 2


@pytest.mark.parametrize("kind", ["fifo", "link loop", "link to /dev/zero", "directory"])
def test_a_result_path_that_is_no_regular_file_is_unreadable_at_once(tmp_path, kind):
    """Something put where a result belongs that is not a file: a FIFO hung the report in
    open(), a link to /dev/zero read without end, a link loop was a traceback. Each is an
    unreadable result (set aside and graded again by the caller), said at once, in the
    cache's second read too."""
    import threading

    good = tmp_path / "evals" / "t" / "a.json"
    good.parent.mkdir(parents=True)
    EvalResult(task="t", submission="a" * 64, key="a", valid=True, score=1.0,
               summary="ok").write(good)
    odd = good.with_name("b.json")
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "link loop":
        odd.symlink_to(odd.name)
    elif kind == "directory":
        odd.mkdir()
    else:
        odd.symlink_to("/dev/zero")
    cache = tmp_path / "cache"

    def read(bad: list[tuple[str, str]], out: dict) -> None:
        out.update(score_cache.read_results([str(good), str(odd)], cache,
                                            on_unreadable=lambda p, w: bad.append((p, w))))

    for _ in range(2):
        bad: list[tuple[str, str]] = []
        out: dict = {}
        worker = threading.Thread(target=read, args=(bad, out), daemon=True)
        worker.start()
        worker.join(20)
        assert not worker.is_alive(), f"reading a {kind} did not return"
        assert list(out) == [str(good)] and [p for p, _ in bad] == [str(odd)]
        assert "unreadable eval result" in bad[0][1]
    with pytest.raises(SforgeError, match=re.escape(str(odd))):
        score_cache.read_results([str(odd)], None)


def test_a_fifo_where_a_result_belongs_is_set_aside_by_the_eval_path(tmp_path):
    """The eval path's reading (load_result) says a FIFO is unreadable and sets it aside to
    be graded again, where open() waited for a writer for ever."""
    import threading

    from sforge.grading.results import load_result

    path = tmp_path / "evals" / "t" / "k.json"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    out: list = []
    worker = threading.Thread(target=lambda: out.append(load_result(path)), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and out == [None]
    assert not os.path.lexists(path) and list((path.parent / "history").iterdir())
