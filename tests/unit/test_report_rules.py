"""The report's rules for people who debug: failed tests first with a filter box, uploads by
their file name, plots fitted to the data with stable colours and no box for a few points,
and the repeats table's statistics against hand-computed values (how the pages render in
a browser: tests/integration/test_report_browser.py)."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sforge.benchmark.hashing import HashCache
from sforge.benchmark.submissions import discover_rows, store_archive
from sforge.commands import evals
from sforge.grading.feedback import Detail
from sforge.report import plots
from sforge.report.state import source_color, source_colors
from sforge.report.views import detail_failed, failed_first
from sforge.scores.leaderboard import board_frame
from sforge.scores.repeats import mean_ci, pass_at_k, repeat_rows, t_quantile
from tests.helpers.report_tables import make_tables, task_page, write


# --------------------------------------------------------------------------- colours
def test_a_source_keeps_its_colour_whatever_other_sources_a_report_has():
    alone = source_colors(["alpha"])["alpha"]
    crowded = source_colors(["aardvark", "alpha", "zeta", "0", "beta"])["alpha"]
    assert alone == crowded == source_color("alpha")
    assert re.fullmatch(r"#[0-9a-f]{6}", alone)
    names = [f"run-r{i}-{k}" for i in range(5) for k in range(3)]
    assert len({source_color(n) for n in names}) == len(names)  # a hash spreads them


def test_two_reports_with_different_sources_colour_a_source_alike(bench, tmp_path):
    first = make_tables(bench, tmp_path / "a", [("alpha", "max_task", 100.0, True, 60.0)])
    second = make_tables(bench, tmp_path / "b", [("zed", "max_task", 50.0, True, 60.0),
                                                 ("aaa", "max_task", 20.0, True, 60.0),
                                                 ("alpha", "max_task", 100.0, True, 60.0)])
    color = source_color("alpha")
    for layout in (first, second):
        write(bench, layout)
        assert f'style="background:{color}"></span>alpha' in layout.report.read_text()
        assert f"fill: {color}" in task_page(layout, "max_task")


# --------------------------------------------------------------------------- axes
def test_an_axis_spans_the_data_with_a_little_padding_not_round_ticks():
    assert plots.fitted_range(41.0, 43.0, 0.05) == pytest.approx((40.9, 43.1))
    axis = plots.Axis(41.0, 43.0, 0, 100, pad=0.05)
    assert (axis.lo, axis.hi) == pytest.approx((40.9, 43.1))
    assert axis.ticks and all(40.9 <= t <= 43.1 for t in axis.ticks)
    assert plots.fitted_range(200.0, 200.0) == pytest.approx((190.0, 210.0))  # one value
    assert plots.fitted_range(0.0, 0.0) == (-0.5, 0.5)


def _rows(scores: list[float], source: str = "a") -> pd.DataFrame:
    n = len(scores)
    return pd.DataFrame({"source": [source] * n, "name": [f"s{i}" for i in range(n)],
                         "valid": [True] * n, "score": scores, "rescaled": scores,
                         "elapsed_s": [600.0 * (i + 1) for i in range(n)],
                         "graded_at": ["2025-01-01T00:00:00+00:00"] * n})


def _task(rescale: object = None) -> SimpleNamespace:
    return SimpleNamespace(score=SimpleNamespace(rescale=rescale, direction="maximize"))


def _x_ticks(svg: str) -> list[float]:
    """The x tick labels' values (the labels on the frame's bottom row)."""
    texts = re.findall(r'<text x="[^"]+" y="([^"]+)"[^>]*>([^<]*)</text>', svg)
    bottom = max(float(y) for y, t in texts if re.fullmatch(r"-?[\d.e+]+", t))
    return [float(t) for y, t in texts if float(y) == bottom]


def test_raw_score_plots_span_the_scores_and_rescaled_ones_0_to_100():
    dist = plots.task_distribution_svg(_task(), _rows([41.0, 42.0, 43.0]), {"a": "#123456"})
    assert dist is not None
    ticks = _x_ticks(dist)
    assert ticks and min(ticks) >= 40.9 and max(ticks) <= 43.1  # not an axis from 0
    timed = plots.task_time_svg(_task({"kind": "linear"}), _rows([10.0, 30.0]), {})
    assert timed is not None
    ys = re.findall(r'text-anchor="end">(\d+)</text>', timed)
    assert ys == ["0", "20", "40", "60", "80", "100"]
    raw = plots.task_time_svg(_task(), _rows([1000.0, 1004.0]), {})
    assert raw is not None
    ys = [float(v) for v in re.findall(r'text-anchor="end">([\d.]+)</text>', raw)]
    assert ys and min(ys) >= 1000 - 0.2 - 1e-9 and max(ys) <= 1004 + 0.2 + 1e-9


def test_tick_labels_stay_inside_the_figure():
    """A long label under the last tick ends at the figure's edge instead of past it."""
    svg = plots.task_distribution_svg(_task(), _rows([43623268300.0, 53623268300.0]), {})
    assert svg is not None
    for x, anchor, text in re.findall(
            r'<text x="([^"]+)" y="[^"]+" font-size="\d+" text-anchor="(\w+)">([^<]*)</text>',
            svg):
        half = plots.CHAR * (plots.FONT - 1) * len(text)
        left = {"start": 0.0, "middle": half / 2, "end": half}[anchor]
        assert float(x) - left >= 0 and float(x) - left + half <= plots.WIDTH, text


# --------------------------------------------------------------------------- boxes
BOX = '<g style="fill: none; stroke:'


@pytest.mark.parametrize(("n", "boxes"), [(1, 0), (4, 0), (5, 1), (9, 1)])
def test_a_box_needs_five_points(n, boxes):
    svg = plots.task_distribution_svg(_task(), _rows([float(i) for i in range(n)]), {})
    assert svg is not None
    assert svg.count(BOX) == boxes
    assert svg.count("<circle") == n  # the points are always there


# --------------------------------------------------------------------------- statistics
def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)  # 1 - C(7,2)/C(10,2)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # every pair holds a solved one
    with pytest.raises(ValueError, match="k ≤ n"):
        pass_at_k(3, 1, 4)


@pytest.mark.parametrize(("df", "t"), [(1, 12.7062), (2, 4.3027), (4, 2.7764),
                                       (9, 2.2622), (30, 2.0423), (1000, 1.9623)])
def test_t_quantiles_match_the_tables(df, t):
    assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)
    assert t_quantile(0.025, df) == pytest.approx(-t, abs=1e-4)


def test_mean_with_a_95_percent_interval():
    mean, sd, low, high = mean_ci([10.0, 20.0, 30.0])
    half = 4.302653 * 10.0 / math.sqrt(3)
    assert (mean, sd) == pytest.approx((20.0, 10.0))
    assert (low, high) == pytest.approx((20.0 - half, 20.0 + half), abs=1e-4)
    assert mean_ci([7.0]) == (7.0, None, None, None)


def test_repeats_table_by_hand(bench):
    """Three repeats of codex/gpt over the five ranked tasks of scores_bench, and an upload
    by hand (no agent: not a repeat of anything)."""
    best = pd.DataFrame({"source": ["r0", "r0", "r1", "r2", "manual"],
                         "task": ["max_task", "min_task", "max_task", "min_task", "max_task"],
                         "rescaled": [100.0, 50.0, 100.0, 100.0, 100.0]})
    people = {s: ("codex", "gpt") for s in ("r0", "r1", "r2")} | {"manual": (None, None)}
    board = board_frame(bench, best, ["manual", "r0", "r1", "r2"], people)
    assert len(bench.ranked_tasks) == 5
    table = repeat_rows(bench, board, best)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["agent"], row["model"], row["repeats"]) == ("codex", "gpt", 3)
    assert row["sources"] == "r0,r1,r2"
    # overall scores 30, 20, 20: mean 23.33, sd √(100/3), half t(0.975, 2)·sd/√3
    half = 4.302653 * math.sqrt(100 / 3) / math.sqrt(3)
    assert row["mean"] == pytest.approx(70 / 3)
    assert row["sd"] == pytest.approx(math.sqrt(100 / 3))
    assert (row["ci95_low"], row["ci95_high"]) == pytest.approx((70 / 3 - half, 70 / 3 + half),
                                                                abs=1e-4)
    # solved (rescaled 100): max_task by 2 of 3, min_task by 1 of 3, the other three by none
    assert row["pass@1"] == pytest.approx((2 / 3 + 1 / 3) / 5)
    assert row["pass@3"] == pytest.approx(2 / 5)
    assert math.isnan(row["pass@5"]) and math.isnan(row["pass@10"])  # k > n
    assert row["best_of_n"] == pytest.approx(200 / 5)


def test_the_index_shows_repeats_and_writes_their_csv(bench, tmp_path):
    layout = make_tables(bench, tmp_path / "r", [("run-a-0", "max_task", 200.0, True, 60.0),
                                                 ("run-a-1", "max_task", 100.0, True, 60.0)])
    html = write(bench, layout)
    assert '<table id="repeats-table"' in html and 'href="#repeats"' in html
    csv = pd.read_csv(layout.leaderboard_repeats)
    assert csv["repeats"].tolist() == [2] and csv["pass@1"].tolist() == [pytest.approx(0.1)]
    single = make_tables(bench, tmp_path / "s", [("run-a-0", "max_task", 200.0, True, 60.0)])
    assert "repeats-table" not in write(bench, single)  # one repeat: nothing to pool
    assert pd.read_csv(single.leaderboard_repeats)["repeats"].tolist() == [1]


# --------------------------------------------------------------------------- task pages
def test_failed_tests_come_first_in_grader_order():
    details = [Detail("a", "PASSED", 1.0, ""), Detail("b", "FAILED", 0.0, "x"),
               Detail("c", "ok", 1.0, ""), Detail("d", "ERROR", None, "y"),
               Detail("e", "", 0.0, ""), Detail("f", "", 1.0, ""), Detail("g", "Skipped", None, "")]
    assert [d.test for d in details if detail_failed(d)] == ["b", "d", "e"]
    assert [d.test for d in failed_first(details)] == ["b", "d", "e", "a", "c", "f", "g"]


def test_a_task_page_lists_failed_tests_first_highlighted_with_a_filter_box(bench, tmp_path):
    layout = make_tables(bench, tmp_path / "r", [("alpha", "max_task", 100.0, True, 60.0)])
    write(bench, layout)
    page = task_page(layout, "max_task")
    # make_tables' grader says case_0_a PASSED, then case_0_b FAILED
    failed = page.index('<tr class="failed-test"><td class="text test">case_0_b</td>')
    assert failed < page.index("<tr><td class=\"text test\">case_0_a</td>")
    assert "2 tests, <span class=\"failed\">1 failed</span>" in page
    box = page.index('<input type="search" class="filter"')
    assert box < page.index('<table class="details">')
    assert 'document.querySelectorAll("input.filter")' in page  # the inline script


# --------------------------------------------------------------------------- uploads by name
def test_an_upload_is_shown_by_its_file_name(bench, tmp_path, monkeypatch):
    """`sforge eval` keeps the archive's file name in the store's sidecar; the tables and the
    task page show it with the start of the hash."""
    layout_root = tmp_path / "results"
    archive = tmp_path / "my solution.tar.gz"
    archive.write_bytes(b"\x1f\x8b" + b"x" * 100)
    store = layout_root / "submissions"
    seen: list[object] = []
    pipe = SimpleNamespace(
        bench=bench, layout=SimpleNamespace(store=store, experiments=tmp_path / "exp"),
        archive_hashes=SimpleNamespace(note=lambda *a: None),
        eval_target=lambda task, sha, path, t: (task, sha),
        eval_path=lambda target: tmp_path / "out.json")
    monkeypatch.setattr(evals, "ensure_judge", lambda *a: None)
    monkeypatch.setattr(evals, "grade", lambda p, target: seen.append(target) or "graded")
    out = evals.eval_archive(pipe, "max_task", str(archive), "manual", None,  # type: ignore[arg-type]
                             SimpleNamespace())  # type: ignore[arg-type]
    sha = out.target[1]
    sidecar = json.loads((store / "manual" / "max_task" / f"{sha}.json").read_text())
    assert sidecar["filename"] == "my solution.tar.gz"
    rows = discover_rows([store], HashCache(tmp_path / "hashes.json"))
    assert [r.name for r in rows] == [f"my solution.tar.gz · {sha[:12]}"]
    # the first upload's name stands for the same bytes uploaded again under another name
    store_archive(store, "manual", "max_task", io.BytesIO(archive.read_bytes()), "now",
                  {"filename": "other.tar.gz"})
    assert json.loads((store / "manual" / "max_task" / f"{sha}.json").read_text())[
        "filename"] == "my solution.tar.gz"


def test_a_task_page_shows_the_upload_name(bench, tmp_path, monkeypatch):
    store = tmp_path / "store"
    store_archive(store, "manual", "max_task", io.BytesIO(b"\x1f\x8bdata"), "now",
                  {"filename": "run-7.tar.gz"})
    row = discover_rows([store], HashCache(tmp_path / "hashes.json"))[0]
    layout = make_tables(bench, tmp_path / "r", [("manual", "max_task", 100.0, True, 60.0)],
                         names=[row.name])
    write(bench, layout)
    page = task_page(layout, "max_task")
    assert f"manual · run-7.tar.gz · {row.sha256[:12]}" in page
    assert Path(row.archive).name == f"{row.sha256}.tar.gz"  # stored by hash all the same
