"""A task without `[score] rescale` is valid but counts 0 on the leaderboard: `sforge check`
warns (tests/fixtures/check/rescale-missing), and the report says so where it shows the
task."""

from __future__ import annotations

from html import unescape

import pytest

from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import Benchmark
from sforge.check import check_benchmark
from sforge.check.tasks import rescale_missing
from tests.helpers.paths import FIXTURES
from tests.helpers.report_tables import make_tables, task_page, write

FIXTURE = FIXTURES / "scores_bench"


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return load_benchmark(FIXTURE)


def test_report_says_a_task_without_rescale_counts_0(bench, tmp_path):
    layout = make_tables(bench, tmp_path, [("alpha", "norescale_task", 3.0, True, 100.0),
                                           ("alpha", "max_task", 100.0, True, 100.0)])
    index = unescape(write(bench, layout))
    assert "alpha: no rescale table, counts 0 in the mean" in index
    page = unescape(task_page(layout, "norescale_task"))
    assert "none (counts 0 on the leaderboard)" in page
    assert "counts 0" not in unescape(task_page(layout, "max_task"))


def test_check_warns_for_each_task_without_rescale(bench):
    warned = {f.file.parent.name for f in check_benchmark(bench.root)
              if f.rule == "rescale-missing"}
    assert warned == {t.id for t in bench.tasks.values() if t.score.rescale is None}
    assert warned  # the fixture has such a task
    (finding,) = rescale_missing(bench.tasks["norescale_task"])
    assert finding.severity == "warning" and "counts 0 on the leaderboard" in finding.message
