"""report.html and the per-task pages: self-contained, escaped, debuggable (how they render
in a real browser: tests/integration/test_report_browser.py)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import pytest

from sforge import scores
from sforge.benchmark.layout import Layout
from sforge.core import forking
from sforge.core.forking import usable_cores
from sforge.grading.results import EvalResult
from sforge.report import markup as report_markup
from sforge.report import pages as report
from sforge.report import state as report_state
from sforge.report import views as report_views
from tests.helpers import paths
from tests.helpers.report_tables import (
    EVIL,
    SAMPLE,
    TOO_BIG,
    make_tables,
    sample_report,
    task_page,
    write,
)

FIXTURE = paths.FIXTURES / "scores_bench"


@pytest.fixture(scope="module")
def pages(bench, tmp_path_factory) -> Layout:
    """One report for the tests that only read it (drawing costs a second or two)."""
    return sample_report(bench, tmp_path_factory.mktemp("pages") / "results")


def all_pages(layout: Layout, runs: bool = False) -> dict[str, str]:
    """The index and the task pages (and runs.html, the agent runs: test_run_pages)."""
    out = {"index": layout.report.read_text()}
    for p in sorted((layout.root / "report").glob("*.html")):
        if runs or p.name != report_state.RUNS_PAGE:
            out[p.stem] = p.read_text()
    return out


# --------------------------------------------------------------------------- static checks
def test_every_page_is_self_contained(pages):
    found = all_pages(pages, runs=True)
    assert set(found) == {"index", "max_task", "min_task", "piece_task", "norescale_task",
                          "empty_task", "runs"}  # runs.html: the agent runs (none here)
    for name, html in found.items():
        text = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
        assert not re.search(r"(?i)\b(https?|ftp|wss?|file):", text), name
        assert "//" not in text, name  # no //host references, no namespace URLs
        assert "<link" not in text and "@import" not in text, name
        assert re.findall(r"url\((?!#)", text) == [], name  # only fragments inside the SVG
        assert re.findall(r"\bsrc=", text) == [], name  # plots are inline SVG
        for href in re.findall(r'\bhref="([^"]*)"', text):  # relative, inside the folder
            assert not href.startswith("/") and ":" not in href, (name, href)
            if not href.startswith("#"):
                base = pages.root if name == "index" else pages.root / "report"
                target = (base / unquote(href.split("#")[0])).resolve()
                assert target.is_file(), (name, href)
                assert pages.root.resolve() in target.parents, (name, href)


def test_index_tables_and_links(pages):
    html = pages.report.read_text()
    assert 'id="leaderboard-table"' in html and 'id="task-table"' in html
    assert 'id="budgets-table"' in html
    for task in ("max_task", "min_task", "piece_task", "norescale_task", "empty_task"):
        assert f'href="report/{task}.html"' in html
    assert html.count('<svg viewBox=') == 2  # leaderboard and budgets
    assert ">18.50<" in html  # the worked example's rescaled best, two decimals


def test_invalid_and_failed_section(pages):
    html = pages.report.read_text()
    section = html.split('id="invalid"')[1]
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1], re.S)
    assert len(rows) == 2  # s2 (invalid) and s9 (failed), newest first
    assert TOO_BIG in rows[0] and ">failed<" in rows[0] and ">beta<" not in rows[0].split(
        "</span>")[0]
    assert "s9" in rows[0] and "min_task" in rows[0]
    assert "s2" in rows[1] and ">invalid<" in rows[1] and "summary of s2" in rows[1]
    key9 = hashlib.sha256(b"9").hexdigest()[:20]
    assert f'href="evals/min_task/{key9}.json"' in rows[0]
    assert f'href="evals/min_task/{key9}.log"' in rows[0]
    assert "2 invalid or failed" in html
    # the task page lists its own, with links one folder up
    page = task_page(pages, "min_task")
    assert TOO_BIG in page and f'href="../evals/min_task/{key9}.json"' in page


def test_task_page_shows_every_submission_with_feedback(pages):
    page = task_page(pages, "max_task")
    subs = re.findall(r'<details class="submission"', page)
    assert len(subs) == 5  # s0, s1, s2, s6 and EVIL's s10
    for i in (0, 1, 2, 6, 10):
        assert f"summary of s{i}" in page
        assert f"case_{i}_a" in page and f"expected {i}, got {i + 1}" in page
    assert ">peak_mb<" in page and ">10.0<" in page
    assert "linear(lower=0.0, upper=200.0)" in page or "linear(lower=0, upper=200)" in page
    assert page.count('<svg viewBox=') == 2  # best so far, distribution
    assert 'href="../report.html"' in page


def test_task_pages_take_feedback_from_the_result_cache(bench, tmp_path, monkeypatch):
    """A task page reads its submissions' details from the cache the tables were made from
    (one file per task, not one per submission), and reads the result files themselves
    when that cache is gone: the same pages either way."""
    layout = make_tables(bench, tmp_path / "results", SAMPLE)
    write(bench, layout, cache=False)
    before = all_pages(layout)
    reads: list[str] = []
    real = report_views.read_feedback
    monkeypatch.setattr(report_views, "read_feedback",
                        lambda path: (reads.append(str(path)), real(path))[1])
    write(bench, layout, cache=False)
    assert reads == [] and all_pages(layout) == before
    # An entry whose feedback is not of the cache's shape is not taken: its file is read.
    import json

    shard = next((layout.root / ".cache" / "scores.csv.results").glob("*.json"))
    data = json.loads(shard.read_text())
    name, entry = next(iter(data["results"].items()))
    for bad in ([[["T", "PASSED", "abc", ""]], {}, []], [{"abcd": 1}, {}, []],
                [[["T", "PASSED", [1], ""]], {}, []]):
        entry[-1] = bad
        shard.write_text(json.dumps(data))
        reads.clear()
        write(bench, layout, cache=False)
        assert [Path(r).name for r in reads] == [name] and all_pages(layout) == before
    shutil.rmtree(layout.root / ".cache" / "scores.csv.results")
    reads.clear()
    write(bench, layout, cache=False)
    assert len(reads) == len({(r[1], i) for i, r in enumerate(SAMPLE)})
    assert all_pages(layout) == before


def test_remembered_detail_rows_keep_what_each_detail_says():
    from sforge.grading.feedback import Detail

    rows = [report_markup._detail_row(Detail("t", "ok", s, "")) for s in (0.0, -0.0, 0.0, 1.0, 1.0)]
    assert [r.split("<td>")[1].split("<")[0] for r in rows] == ["0", "-0", "0", "1", "1"]
    assert "&lt;b&gt;" in report_markup._detail_row(Detail("<b>", "", None, ""))


def test_a_table_is_sortable_markup_with_every_cell_escaped():
    from sforge.report.markup import table_html
    from sforge.report.views import Cell

    rows = [[Cell(EVIL, "t<1>", title='a "q" & b', href="report/t%3C1%3E.html"),
             Cell("x&y", "-1", "background:#fbe3e3", color="#1f77b4"), Cell("3", "3")]]
    html = str(table_html("tid", ["task", "s&1", "n<"], rows, 2))
    assert html.startswith('<div class="scroll">\n<table id="tid" class="sortable">')
    assert '<thead><tr><th class="text">task</th><th class="text">s&amp;1</th><th>n&lt;</th>' \
        in html
    assert ('<tr><td class="text" data-v="t&lt;1&gt;" title="a &#34;q&#34; &amp; b">'
            '<a href="report/t%3C1%3E.html">&lt;script&gt;') in html and EVIL not in html
    assert ('<td class="text src" data-v="-1" style="background:#fbe3e3"><span class="sw" '
            'style="background:#1f77b4"></span>x&amp;y</td><td data-v="3">3</td></tr>\n') in html
    assert html.endswith("</tbody>\n</table>\n</div>")
    assert str(table_html("e", ["a"], [], 1)).count("<tr>") == 1  # the header only


def test_a_plot_samples_many_points_keeping_every_improvement():
    """Over MAX_POINTS timed submissions of one source, the time plot shows MAX_POINTS of
    them, always with those where the best so far improved; the distribution shows
    MAX_POINTS too, and the same rows give the same picture."""
    import pandas as pd

    from sforge.report import plots

    n = plots.MAX_POINTS + 150
    scores = [float(i % 97) + (i // 97) * 0.01 for i in range(n)]
    rows = pd.DataFrame({
        "source": ["a"] * n, "name": [f"s{i}" for i in range(n)], "valid": [True] * n,
        "score": scores, "rescaled": scores, "elapsed_s": [60.0 * i for i in range(n)],
        "graded_at": ["2025-01-01T00:00:00+00:00"] * n})
    task = SimpleNamespace(score=SimpleNamespace(rescale=None, direction="maximize"))
    colors = report_state.source_colors(["a"])
    svg = plots.task_time_svg(task, rows, colors)
    assert svg is not None and svg.count("<circle") == plots.MAX_POINTS
    best, improved = -1.0, []
    for i, s in enumerate(scores):
        if s > best:
            best, _ = s, improved.append(f"a · s{i}\n")
    assert all(name in svg for name in improved)
    dist = plots.task_distribution_svg(task, rows, colors)
    assert dist is not None and dist.count("<circle") == plots.MAX_POINTS
    assert plots.task_time_svg(task, rows, colors) == svg
    assert plots.task_distribution_svg(task, rows, colors) == dist


def test_plots_say_what_each_point_is(pages):
    page = task_page(pages, "max_task")
    titles = re.findall(r"<title>(.*?)</title>", page.split("<body>")[1], re.S)
    tips = [t for t in titles if "raw" in t]
    # the distribution shows the 4 valid raws, the time plot the 3 timed valid ones
    assert len(tips) == 4 + 3
    s1 = [t for t in tips if "alpha · s1" in t]
    assert s1 and "raw 150" in s1[0] and "rescaled 75" in s1[0] and "1.50 h" in s1[0]
    board = pages.report.read_text()
    assert "<title>alpha: 33.7 (4 of 5 tasks valid)</title>" in board


def test_source_colours_agree_everywhere(pages):
    index, page = pages.report.read_text(), task_page(pages, "max_task")

    def swatch(html: str, source: str) -> set[str]:
        return set(re.findall(r'<span class="sw" style="background:(#[0-9a-f]{6})"></span>'
                              + re.escape(source) + "<", html))

    for source in ("alpha", "beta"):
        colours = swatch(index, source) | swatch(page, source)
        assert len(colours) == 1, (source, colours)
        # the plot draws that source's points in the same colour
        assert f"fill: {colours.pop()}" in page
    assert swatch(index, "alpha") != swatch(index, "beta")


def test_text_is_escaped(pages):
    for name, html in all_pages(pages).items():
        assert EVIL not in html, name
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;co" in pages.report.read_text()


def test_empty_tables_give_pages(bench, tmp_path):
    layout = make_tables(bench, tmp_path, [])
    html = write(bench, layout)
    assert "No graded submissions yet." in html and 'id="no-invalid"' in html
    assert 'id="task-table"' in html and "<svg" not in html
    assert "No graded submissions." in task_page(layout, "max_task")


def test_unchanged_task_pages_are_not_rendered_again(bench, tmp_path, monkeypatch):
    layout = make_tables(bench, tmp_path / "r", SAMPLE)
    write(bench, layout)
    cache = layout.root / ".cache" / "report-pages"
    assert len(list(cache.glob("*.html"))) == 5
    before = all_pages(layout)

    def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("rendered an unchanged task page")

    monkeypatch.setattr(report, "render_task_page", fail)
    write(bench, layout)
    after = all_pages(layout)
    strip = re.compile(r"generated [^<]* by")
    assert {k: strip.sub("", v) for k, v in before.items()} == \
        {k: strip.sub("", v) for k, v in after.items()}
    monkeypatch.undo()
    # one more result for min_task: only its page is rendered again, the old one pruned
    layout = make_tables(bench, tmp_path / "r", [*SAMPLE, ("beta", "min_task", 30.0, True,
                                                          8000.0)])
    calls: list[str] = []
    real = report.render_task_page
    monkeypatch.setattr(report, "render_task_page",
                        lambda env, b, task, *a: calls.append(task.id) or real(env, b, task, *a))
    write(bench, layout)
    assert calls == ["min_task"]
    assert len(list(cache.glob("*.html"))) == 5
    assert "s11" in task_page(layout, "min_task")


def test_report_without_cache(bench, tmp_path):
    layout = make_tables(bench, tmp_path, SAMPLE[:3])
    write(bench, layout, cache=False)
    assert not (layout.root / ".cache" / "report-pages").exists()
    assert (layout.root / "report" / "max_task.html").is_file()


def test_odd_source_names_do_not_break_plots(bench, tmp_path):
    """Source names are free text: "$...$" (mathtext to some plotting libraries), a leading "_"
    (a hidden legend entry to matplotlib), long names, tabs and accents."""
    names = [r"$\frac$", "_hidden", "a" * 80, "two $ signs $x^2$", "tab\tand ünï"]
    rows = [(n, "max_task", 10.0 * (i + 1), True, 600.0 * (i + 1)) for i, n in enumerate(names)]
    rows += [(n, "min_task", 50.0, True, 100.0) for n in names]
    layout = make_tables(bench, tmp_path, rows)
    html = write(bench, layout)
    assert html.count("<svg viewBox=") == 2
    assert task_page(layout, "max_task").count("<svg viewBox=") == 2
    assert "_hidden" in html and "a" * 80 in html


def test_extreme_scores_and_times_are_drawn_at_the_axis_ends(bench, tmp_path):
    """A grader's 1e308 (a span between two such is no float) and a clock's 1e308 s: the
    report is made, every plot drawn, no coordinate longer than a number should be."""
    rows = [("a", "norescale_task", -1e308, True, 60.0), ("a", "norescale_task", 1e308, True,
                                                            1e308),
            ("b", "norescale_task", 5.0, True, 120.0), ("a", "max_task", 1e308, True, 1e308),
            ("b", "max_task", -1e308, True, 10.0)]
    layout = make_tables(bench, tmp_path, rows)
    write(bench, layout)
    for task in ("norescale_task", "max_task"):
        page = task_page(layout, task)
        assert page.count("<svg viewBox=") == 2, task
        coords = re.findall(r'\s(?:x|y|cx|cy|x1|x2|y1|y2|width|height)="([^"]*)"', page)
        assert coords and max(len(c) for c in coords) <= 8, task
        assert "raw 1e+308" in page and "inf" not in " ".join(coords)


# --------------------------------------------------------------------------- sforge report
def _pipeline(bench_dir: Path, results: Path):  # type: ignore[no-untyped-def]
    from sforge.core.config import user_config
    from sforge.plan.pipeline import Pipeline

    return Pipeline.from_config(user_config(None, {"benchmark": str(bench_dir),
                                                   "results": str(results)}))


def _graded_world(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    """A copy of the fixture benchmark with archives in submissions/ and, for each, the
    result file its eval key names (as if graded): what `sforge report` finds."""
    import gzip
    import io
    import tarfile

    from sforge.core.fileio import atomic_write_text

    bench_dir, results = tmp_path / "bench", tmp_path / "results"
    shutil.copytree(FIXTURE, bench_dir)
    for i, (source, task, _score, _valid, elapsed, *_rest) in enumerate(SAMPLE):
        if source == EVIL:
            source = "evil"
        folder = bench_dir / "submissions" / source / task
        folder.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("answer.txt")
            info.size = len(str(i))
            tar.addfile(info, io.BytesIO(str(i).encode()))
        (folder / f"s{i}.tar.gz").write_bytes(gzip.compress(buf.getvalue(), mtime=0))
        if elapsed is not None:
            atomic_write_text(folder / f"s{i}.json", f'{{"elapsed_s": {elapsed}}}')
    pipe = _pipeline(bench_dir, results)
    paths = {}
    for sub, path in pipe.records():
        i = int(sub.name[1:])
        _, task, score, valid, _, *rest = SAMPLE[i]
        path.parent.mkdir(parents=True, exist_ok=True)
        EvalResult(task=task, submission=sub.sha256, key=path.stem, valid=valid, score=score,
                   summary=f"summary of s{i}", reason=rest[0] if rest else None,
                   details=[{"name": f"case_{i}", "status": "PASSED", "score": 1}],
                   finished_at=f"2025-01-01T00:{i:02d}:00+00:00").write(path)
        paths[sub.name] = path
    return bench_dir, results, paths


def test_a_report_right_after_fresh_writes_leaves_the_next_one_nothing(tmp_path,
                                                                      monkeypatch):
    """A task whose folders changed too recently at the scan has no fingerprint; it is
    fingerprinted again just before its records are listed, so the report after it (nothing
    changed) lists, computes and renders nothing."""
    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)
    bench_dir, results, _ = _graded_world(tmp_path)
    real = folders.fingerprints
    scans: list[dict] = []

    def first_too_fresh(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        scans.append(out)
        return dict.fromkeys(out) if len(scans) == 1 else out

    monkeypatch.setattr(folders, "fingerprints", first_too_fresh)
    ex = evals.Execution()
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    assert len(scans) == 2 and set(scans[1]) == set(scans[0])
    monkeypatch.setattr(folders, "fingerprints", real)
    rendered: list[str] = []
    listed: list[list[str] | None] = []
    real_render, real_records = report.render_task_page, evals.Pipeline.record_rows
    monkeypatch.setattr(report, "render_task_page", lambda env, b, task, *a: (
        rendered.append(task.id), real_render(env, b, task, *a))[1])
    monkeypatch.setattr(evals.Pipeline, "record_rows", lambda self, ids=None: (
        listed.append(ids), real_records(self, ids))[1])
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    assert rendered == [] and listed == []


def test_a_result_changed_before_a_late_fingerprint_is_read_again(tmp_path, monkeypatch):
    """The tables take the results grading's check has just read, except for a task that is
    fingerprinted again later (too fresh at the scan): a result changed in between is read
    anew, not stored under a fingerprint that already shows the change."""
    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)
    bench_dir, results, paths = _graded_world(tmp_path)
    real = folders.fingerprints
    scans: list[dict] = []

    def first_too_fresh(*args, **kwargs):  # type: ignore[no-untyped-def]
        if len(scans) == 1:  # the late fingerprint: s7 (beta, min_task) changed just before
            changed = EvalResult.read(paths["s7"])
            changed.score = 65.0
            changed.write(paths["s7"])
        out = real(*args, **kwargs)
        scans.append(out)
        return dict.fromkeys(out) if len(scans) == 1 else out

    monkeypatch.setattr(folders, "fingerprints", first_too_fresh)
    assert evals.make_report(_pipeline(bench_dir, results), evals.Execution())
    assert len(scans) == 2
    lay = _pipeline(bench_dir, results).layout
    rows = scores.read_scores(lay.scores)
    assert rows.loc[rows["name"] == "s7", "score"].tolist() == [65.0]


def test_sforge_report_redoes_only_the_changed_task(tmp_path, monkeypatch):
    """`sforge report` after one changed result computes and renders that task alone (the
    others are not even listed), and its tables and pages are those the one-table path
    makes from scratch."""
    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)  # folders this fresh count as settled here
    bench_dir, results, paths = _graded_world(tmp_path)
    ex = evals.Execution()
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    lay = _pipeline(bench_dir, results).layout
    assert set(all_pages(lay)) == {"index", "max_task", "min_task", "piece_task",
                                   "norescale_task", "empty_task"}

    changed = EvalResult.read(paths["s7"])  # beta on min_task
    changed.score = 65.0
    changed.write(paths["s7"])
    rendered: list[str] = []
    listed: list[list[str] | None] = []
    real_render, real_records = report.render_task_page, evals.Pipeline.record_rows
    monkeypatch.setattr(report, "render_task_page", lambda env, b, task, *a: (
        rendered.append(task.id), real_render(env, b, task, *a))[1])
    monkeypatch.setattr(evals.Pipeline, "record_rows", lambda self, ids=None: (
        listed.append(ids), real_records(self, ids))[1])
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    assert rendered == ["min_task"]
    assert all(ids == ["min_task"] for ids in listed) and listed
    fast = all_pages(lay)
    tables = {p.name: p.read_text() for p in (lay.scores, lay.best, lay.leaderboard,
                                              lay.leaderboard_md, lay.budgets)}
    assert "65.0" in tables["scores.csv"]

    monkeypatch.undo()
    assert (tables, _undated(fast)) == _from_scratch(tmp_path / "chain", bench_dir, results)


_TABLES = ("scores.csv", "best.csv", "leaderboard.csv", "leaderboard.md", "budgets.csv")


def _undated(pages: dict[str, str]) -> dict[str, str]:
    return {k: re.sub(r"generated [^<]* by", "", v) for k, v in pages.items()}


def _from_scratch(chain: Path, bench_dir: Path, results: Path
                  ) -> tuple[dict[str, str], dict[str, str]]:
    """The tables and pages (undated) of the results on disk, made by the one-table path
    from a copy of them: what any report must leave."""
    pipe = _pipeline(bench_dir, results)
    shutil.copytree(results / pipe.bench.name / "evals", chain / "evals")
    records = [(s, chain / "evals" / p.parent.name / p.name) for s, p in pipe.records()]
    scores.write_scores(pipe.bench, records, chain / "scores.csv", cache=False)
    scores.write_best(pipe.bench, chain / "scores.csv", chain / "best.csv")
    scores.write_leaderboard(pipe.bench, chain / "best.csv", chain / "scores.csv",
                             chain / "leaderboard.csv", chain / "leaderboard.md",
                             chain / "budgets.csv", pipe.config["budgets_hours"])
    report.write_report(pipe.bench, chain / "scores.csv", chain / "best.csv",
                        chain / "leaderboard.csv", chain / "budgets.csv", chain / "report.html")
    return ({name: (chain / name).read_text() for name in _TABLES},
            _undated(all_pages(Layout(chain))))


def test_two_reports_at_once_end_with_the_tables_of_the_results_on_disk(tmp_path):
    """A report that starts while another is between its writes waits for it (saying so)
    rather than interleave: they left the best.csv and leaderboard of the older beside the
    scores.csv of the newer, under a store that said nothing changed ever after."""
    import sys
    import time

    bench_dir, results, paths = _graded_world(tmp_path)
    gate = tmp_path / "gate"
    gate.mkdir()
    code = ("import sys, time, pathlib, sforge.scores.folders as f; f.RACY_NS = -1\n"
            "from sforge.cli import main as cli\n"
            "from sforge.scores import parts\n"
            "gate = pathlib.Path(sys.argv[1])\n"
            "real = parts.atomic_write_text\n"
            "def paused(path, text):\n"
            "    if pathlib.Path(path).name == 'best.csv' and gate.name == 'gate':\n"
            "        (gate / 'at').touch()\n"
            "        while not (gate / 'go').exists():\n"
            "            time.sleep(0.02)\n"
            "    real(path, text)\n"
            "parts.atomic_write_text = paused\n"
            f"sys.exit(cli.main(['-b', {str(bench_dir)!r}, '--results', {str(results)!r}, "
            "'report']))\n")

    def start(gate_dir: Path, err: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code, str(gate_dir)],
                                stdout=subprocess.DEVNULL, stderr=err.open("w"))

    def score(name: str, value: float) -> None:
        changed = EvalResult.read(paths[name])
        changed.score = value
        changed.write(paths[name])

    assert start(tmp_path / "no-gate", tmp_path / "first.err").wait(120) == 0
    lay = _pipeline(bench_dir, results).layout
    score("s7", 65.0)  # beta's best on min_task (minimize) now
    first = start(gate, tmp_path / "a.err")
    deadline = time.monotonic() + 60
    while not (gate / "at").exists():  # A has written scores.csv, not best.csv
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    score("s7", 60.0)  # and better again
    second = start(tmp_path / "no-gate", tmp_path / "b.err")
    while "waiting for another report" not in (tmp_path / "b.err").read_text():
        assert second.poll() is None and time.monotonic() < deadline, \
            (tmp_path / "b.err").read_text()
        time.sleep(0.05)
    assert "65.0" in lay.scores.read_text()  # B wrote nothing while A holds the tables
    (gate / "go").touch()
    assert first.wait(120) == 0 and second.wait(120) == 0
    made = {name: (lay.root / name).read_text() for name in _TABLES}
    assert "60.0" in made["scores.csv"] and "65.0" not in made["scores.csv"]
    assert (made, _undated(all_pages(lay))) == \
        _from_scratch(tmp_path / "chain", bench_dir, results)


def test_a_report_with_nothing_changed_imports_no_pandas_and_writes_nothing(tmp_path):
    """The usual `sforge report` of a CI job that graded nothing new: decided from the
    stores alone (no pandas, no templates: ~0.5 s), every table and page left as it is,
    the same leaderboard printed; a leaderboard.csv written anew is printed anew."""
    import sys

    from sforge.core.fileio import atomic_write_text

    bench_dir, results, _ = _graded_world(tmp_path)
    code = ("import sys, sforge.scores.folders as f; f.RACY_NS = -1\n"
            "from sforge.cli import main as cli\n"
            f"rc = cli.main(['-b', {str(bench_dir)!r}, '--results', {str(results)!r}, "
            "'report'])\n"
            "print('imported:', sorted(m for m in ('pandas', 'jinja2', 'numpy') "
            "if m in sys.modules))\n"
            "sys.exit(rc)\n")

    def report_run() -> str:
        return subprocess.run([sys.executable, "-c", code], check=True, text=True,
                              capture_output=True).stdout

    first = report_run()
    assert "imported: ['jinja2', 'numpy', 'pandas']" in first
    lay = _pipeline(bench_dir, results).layout
    made = sorted([lay.scores, lay.best, lay.leaderboard, lay.leaderboard_md, lay.budgets,
                   lay.report, *lay.report_pages.glob("*.html")])
    stats = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in made}
    second = report_run()
    assert "imported: []" in second
    assert second.replace("imported: []", "") == \
        first.replace("imported: ['jinja2', 'numpy', 'pandas']", "")
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in made} == stats
    assert "| alpha" in second  # the leaderboard itself
    board = lay.leaderboard.read_text()
    atomic_write_text(lay.leaderboard, board.replace("alpha", "alfa"))
    assert "alfa" in scores.leaderboard_text(lay.leaderboard)
    atomic_write_text(lay.leaderboard, board)
    assert scores.leaderboard_text(lay.leaderboard) in first
    # a text another sforge version remembered for this very file is made anew
    from sforge.scores import terminal

    memo = terminal._memo_path(lay.leaderboard)
    data = json.loads(memo.read_text())
    memo.write_text(json.dumps({**data, "version": [data["version"][0], "0.0.0-other"],
                                "text": "stale"}))
    assert scores.leaderboard_text(lay.leaderboard) in first


@pytest.mark.skipif(usable_cores() < 2, reason="needs two cores for worker processes")
def test_pages_rendered_in_worker_processes_are_the_serial_ones(tmp_path, monkeypatch):
    """Many pages to render are shared out to forked workers (sforge.core.forking): the pages
    are rendered there, not here, and are byte for byte those of a serial run."""
    import os

    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)
    bench_dir, results, _ = _graded_world(tmp_path)
    # Earlier tests of this pytest process leave idle threads behind, which keep
    # fork_map serial; `sforge report` itself has none.
    monkeypatch.setattr(forking, "threading", SimpleNamespace(active_count=lambda: 1))
    serial_results = tmp_path / "serial"
    shutil.copytree(results, serial_results)
    ex = evals.Execution()
    monkeypatch.setattr(report, "PAGES_PER_PROCESS", 10**6)
    assert evals.make_report(_pipeline(bench_dir, serial_results), ex)
    serial = all_pages(_pipeline(bench_dir, serial_results).layout)

    pids = tmp_path / "pids"
    pids.mkdir()
    real_render = report.render_task_page

    def render(*a):  # type: ignore[no-untyped-def]
        (pids / str(os.getpid())).touch()
        return real_render(*a)

    monkeypatch.setattr(report, "render_task_page", render)
    monkeypatch.setattr(report, "PAGES_PER_PROCESS", 1)
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    workers = {int(p.name) for p in pids.iterdir()}
    assert workers and os.getpid() not in workers
    strip = re.compile(r"generated [^<]* by")
    parallel = all_pages(_pipeline(bench_dir, results).layout)
    assert len(serial) == 6
    assert {k: strip.sub("", v) for k, v in parallel.items()} == \
        {k: strip.sub("", v) for k, v in serial.items()}


def test_a_result_with_a_lone_surrogate_from_another_tool_is_reported(tmp_path, monkeypatch):
    """JSON allows a lone surrogate escape ("\\ud800"); sforge's own results never hold one,
    but a result written by another tool may. It is U+FFFD in the tables and pages (it
    stopped every report: a surrogate cannot be written as UTF-8)."""
    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)
    bench_dir, results, paths = _graded_world(tmp_path)
    data = json.loads(paths["s0"].read_text())
    data["summary"] = "judge said \ud800"
    data["details"][0]["name"] = "case \udfff"
    paths["s0"].write_text(json.dumps(data))  # escaped: valid JSON, ASCII on disk
    for _ in range(2):
        assert evals.make_report(_pipeline(bench_dir, results), evals.Execution())
    lay = _pipeline(bench_dir, results).layout
    assert "judge said \ufffd" in lay.scores.read_text(encoding="utf-8")
    page = (lay.report_pages / "max_task.html").read_text(encoding="utf-8")
    assert "judge said \ufffd" in page and "case \ufffd" in page


def test_cache_entries_of_another_shape_are_not_taken(tmp_path, monkeypatch):
    """A stored table part or a result-cache entry of another shape (a .cache edited by
    hand) is dropped, never taken for a table: the task is computed again from its result
    files (it was a KeyError or TypeError in every later report)."""
    from sforge.commands import evals
    from sforge.scores import folders
    from sforge.scores.cache import cache_path
    from sforge.scores.store import parts_path

    monkeypatch.setattr(folders, "RACY_NS", -1)
    bench_dir, results, _ = _graded_world(tmp_path)
    assert evals.make_report(_pipeline(bench_dir, results), evals.Execution())
    lay = _pipeline(bench_dir, results).layout
    store = parts_path(lay.scores)
    data = json.loads(store.read_text())
    del data["parts"]["max_task"]["index"]
    data["parts"]["min_task"]["best"]["score"] = {"not": "a list"}
    store.write_text(json.dumps(data))
    for shard in cache_path(lay.scores).glob("*.json"):
        cached = json.loads(shard.read_text())
        cached["results"] = {name: [e[0], *[{"x": 1}] * (len(e) - 2), e[-1]]
                             for name, e in cached["results"].items()}
        shard.write_text(json.dumps(cached))
    assert evals.make_report(_pipeline(bench_dir, results), evals.Execution())
    made = {name: (lay.root / name).read_text() for name in _TABLES}
    assert (made, _undated(all_pages(lay))) == \
        _from_scratch(tmp_path / "chain", bench_dir, results)


def test_an_archive_rewritten_in_place_is_seen_after_sforge_grade(tmp_path, monkeypatch):
    """`cp` over an archive leaves its folder's stat as it was. The listing that hashes it
    anew (here `sforge clean`'s, before `sforge grade`) marks its task: when a result for
    its new bytes is there already nothing is graded, yet the next report must show the
    new archive (it stayed on the old archive and score for ever)."""
    from sforge.benchmark.hashing import HashCache
    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)
    monkeypatch.setattr(HashCache, "RACY_NS", -1)  # archives this fresh are cached here
    bench_dir, results, _ = _graded_world(tmp_path)
    ex = evals.Execution()
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    folder = bench_dir / "submissions" / "alpha" / "max_task"
    inode = (folder / "s0.tar.gz").stat().st_ino
    shutil.copyfile(folder / "s1.tar.gz", folder / "s0.tar.gz")  # in place, as cp does
    assert (folder / "s0.tar.gz").stat().st_ino == inode
    # Any listing may hash it anew first (`sforge clean`, a Snakemake grading job), and
    # remember the new digest: that one marks the task.
    assert len(_pipeline(bench_dir, results).submissions()) == len(SAMPLE)
    out = evals.grade_pending(_pipeline(bench_dir, results), None, ex)
    assert out.missing == 0  # s1's result stands for s0's new bytes: nothing graded
    assert evals.make_report(_pipeline(bench_dir, results), ex)
    lay = _pipeline(bench_dir, results).layout
    rows = scores.read_scores(lay.scores).set_index("name")
    assert rows.loc["s0", "submission"] == rows.loc["s1", "submission"]
    made = {name: (lay.root / name).read_text() for name in _TABLES}
    assert (made, _undated(all_pages(lay))) == \
        _from_scratch(tmp_path / "chain", bench_dir, results)


def test_submissions_without_a_utf8_name_are_left_out_with_a_warning(tmp_path, monkeypatch,
                                                                      caplog):
    """A source folder or an archive whose name is not UTF-8 cannot be named in a table or
    a page: it is left out, with a warning naming it (every report failed on it)."""
    import os

    from sforge.commands import evals
    from sforge.scores import folders

    monkeypatch.setattr(folders, "RACY_NS", -1)
    bench_dir, results, _ = _graded_world(tmp_path)
    subs = os.fsencode(bench_dir / "submissions")
    os.makedirs(subs + b"/\xff/max_task")
    shutil.copyfile(bench_dir / "submissions" / "alpha" / "max_task" / "s0.tar.gz",
                    subs + b"/\xff/max_task/s0.tar.gz")
    shutil.copyfile(bench_dir / "submissions" / "alpha" / "max_task" / "s1.tar.gz",
                    subs + b"/alpha/max_task/r\xfe.tar.gz")
    assert evals.make_report(_pipeline(bench_dir, results), evals.Execution())
    assert "submissions/\\xff'" in caplog.text and "r\\xfe.tar.gz'" in caplog.text
    assert "not a UTF-8 name" in caplog.text
    lay = _pipeline(bench_dir, results).layout
    assert len(scores.read_scores(lay.scores)) == len(SAMPLE)
