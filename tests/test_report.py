"""report.html: self-contained (no URL), escaped, and it renders in a real browser.

The browser test opens the page in headless Chromium (Debian package `chromium`) from a
file:// URL with networking features off, dumps the DOM after load and checks that the
tables are there and every embedded image decoded.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sforge import report, scores
from sforge.loader import load_benchmark
from sforge.model import Benchmark
from sforge.results import EvalResult
from sforge.submissions import Submission

FIXTURE = Path(__file__).parent / "fixtures" / "scores_bench"
EVIL = '<script>alert("x")</script>&co'


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return load_benchmark(FIXTURE)


def make_tables(bench: Benchmark, root: Path, rows: list[tuple]) -> dict[str, Path]:
    """rows: (source, task, score, valid, elapsed_s) → the four CSVs, as the rules make them."""
    records = []
    for i, (source, task, score, valid, elapsed) in enumerate(rows):
        sha = hashlib.sha256(f"{i}".encode()).hexdigest()
        path = root / "evals" / task / f"{sha[:20]}.json"
        EvalResult(task=task, submission=sha, key=sha[:20], valid=valid, score=score,
                   summary="ok", finished_at=f"2025-01-01T00:{i % 60:02d}:00+00:00").write(path)
        records.append((Submission(source=source, task=task, name=f"s{i}", path=root / "x",
                                   sha256=sha, elapsed_s=elapsed, agent="agent"), path))
    out = root / "out"
    paths = {n: out / f"{n}.csv" for n in ("scores", "best", "leaderboard", "budgets")}
    scores.write_scores(bench, records, paths["scores"])
    scores.write_best(bench, paths["scores"], paths["best"])
    scores.write_leaderboard(bench, paths["best"], paths["scores"], paths["leaderboard"],
                             out / "leaderboard.md", paths["budgets"], [1, 2])
    return paths


def write(bench: Benchmark, paths: dict[str, Path], **kw) -> str:  # type: ignore[no-untyped-def]
    out = paths["scores"].parent / "report.html"
    report.write_report(bench, paths["scores"], paths["best"], paths["leaderboard"],
                        paths["budgets"], out, **kw)
    return out.read_text()


SAMPLE = [
    ("alpha", "max_task", 100.0, True, 1800.0),
    ("alpha", "max_task", 150.0, True, 5400.0),
    ("alpha", "max_task", 199.0, False, 6000.0),
    ("alpha", "min_task", 40.0, True, 600.0),
    ("alpha", "piece_task", 43623268300.0, True, 3000.0),
    ("alpha", "norescale_task", 3.0, True, 100.0),
    ("beta", "max_task", 60.0, True, 900.0),
    ("beta", "min_task", 90.0, True, 700.0),
    ("beta", "min_task", 70.0, True, 7000.0),
    (EVIL, "max_task", 10.0, True, None),
]


@pytest.fixture
def page(bench, tmp_path) -> tuple[str, Path]:
    paths = make_tables(bench, tmp_path, SAMPLE)
    return write(bench, paths), paths["scores"].parent / "report.html"


def strip_data_uris(html: str) -> str:
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", html)


# --------------------------------------------------------------------------- static checks
def test_self_contained_no_urls(page):
    html, _ = page
    text = strip_data_uris(html)
    assert not re.search(r"(?i)\b(https?|ftp|wss?):", text)
    assert "//" not in re.sub(r"<script>.*?</script>", "", text, flags=re.S)  # no //host refs
    for attr in re.findall(r'\b(?:src|href)="([^"]*)"', text):
        assert attr.startswith(("data:", "#")), attr
    assert "<link" not in text and "@import" not in text and "url(" not in text


def test_tables_and_images_present(page):
    html, _ = page
    assert 'id="leaderboard-table"' in html and 'id="task-table"' in html
    assert 'id="budgets-table"' in html
    for task in ("max_task", "min_task", "piece_task", "norescale_task", "empty_task"):
        assert f'id="task-{task}"' in html and f'href="#task-{task}"' in html
    assert html.count('src="data:image/png;base64,') >= 5  # board, budgets, 3+ tasks
    # the worked example's rescaled best appears with two decimals
    assert ">18.50<" in html


def test_text_is_escaped(page):
    html, _ = page
    assert EVIL not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;co" in html


def test_empty_tables_give_a_page(bench, tmp_path):
    html = write(bench, make_tables(bench, tmp_path, []))
    assert "No graded submissions yet." in html
    assert 'id="task-table"' in html and "<img" not in html


def test_plot_cache_reuses_unchanged_tasks(bench, tmp_path, monkeypatch):
    paths = make_tables(bench, tmp_path, SAMPLE)
    first = write(bench, paths)
    cache = tmp_path / "out" / ".cache" / "report-plots"
    pngs = sorted(cache.glob("*.png"))
    assert len(pngs) == 4  # the tasks with valid results

    def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("re-plotted an unchanged task")

    monkeypatch.setattr(report, "_task_figure", fail)
    second = write(bench, paths)
    strip = re.compile(r"generated [^<]* by")
    assert strip.sub("", first) == strip.sub("", second)
    monkeypatch.undo()
    # one result changes: one task is re-plotted, its old picture is pruned
    paths = make_tables(bench, tmp_path / "again", [*SAMPLE[:-1], ("beta", "min_task", 30.0,
                                                                   True, 8000.0)])
    calls: list[str] = []
    real = report._task_figure
    monkeypatch.setattr(report, "_task_figure",
                        lambda task, *a: calls.append(task.id) or real(task, *a))
    report.write_report(bench, paths["scores"], paths["best"], paths["leaderboard"],
                        paths["budgets"], tmp_path / "out" / "report.html")
    assert sorted(calls) == ["max_task", "min_task"]  # EVIL's max_task row is gone too
    assert len(list(cache.glob("*.png"))) == 4


def test_report_without_cache(bench, tmp_path):
    paths = make_tables(bench, tmp_path, SAMPLE[:3])
    write(bench, paths, cache=False)
    assert not (tmp_path / "out" / ".cache" / "report-plots").exists()


# --------------------------------------------------------------------------- the browser
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)

# Appended to a copy of the page only: records whether each image decoded.
PROBE = """<script>
window.addEventListener("load", function () {
  document.querySelectorAll("img").forEach(function (img, i) {
    img.setAttribute("data-probe", img.complete && img.naturalWidth > 0 ?
                     "ok:" + img.naturalWidth + "x" + img.naturalHeight : "broken");
  });
  document.body.setAttribute("data-probed", "yes");
});
</script>"""


def dump_dom(html_path: Path, profile: Path) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
           "--dump-dom", html_path.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                    "(Debian: apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(page, tmp_path):
    html, path = page
    probed = path.with_name("probed.html")
    probed.write_text(html.replace("</body>", PROBE + "\n</body>"))
    dom = dump_dom(probed, tmp_path / "chromium-profile")
    assert 'data-probed="yes"' in dom, dom[:500]

    board = re.search(r'<table id="leaderboard-table"[^>]*>(.*?)</table>', dom, re.S)
    assert board, "leaderboard table missing from the DOM"
    assert 'class="sortable ready"' in dom  # the inline script ran without error
    body_rows = re.findall(r"<tr>(.*?)</tr>", board.group(1).split("<tbody>")[1], re.S)
    assert len(body_rows) == 3
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in body_rows]
    assert [c[1] for c in cells] == ["alpha", "beta",
                                     '&lt;script&gt;alert("x")&lt;/script&gt;&amp;co']
    assert [c[0] for c in cells] == ["1", "2", "3"]

    tasks = re.search(r'<table id="task-table"[^>]*>(.*?)</table>', dom, re.S)
    assert tasks, "per-task table missing from the DOM"
    task_rows = re.findall(r"<tr>(.*?)</tr>", tasks.group(1).split("<tbody>")[1], re.S)
    assert len(task_rows) == 5
    assert 'href="#task-piece_task"' in tasks.group(1)

    probes = re.findall(r'data-probe="([^"]+)"', dom)
    assert len(probes) >= 5 and all(p.startswith("ok:") for p in probes), probes
    # the injected alert() never became a script element
    assert "<script>alert" not in dom


def test_odd_source_names_do_not_break_plots(bench, tmp_path):
    """matplotlib reads "$...$" as mathtext (a malformed one raises while drawing) and hides
    legend labels that start with "_"; source names are free text."""
    names = [r"$\frac$", "_hidden", "a" * 80, "two $ signs $x^2$", "tab\tand ünï"]
    rows = [(n, "max_task", 10.0 * (i + 1), True, 600.0 * (i + 1)) for i, n in enumerate(names)]
    rows += [(n, "min_task", 50.0, True, 100.0) for n in names]
    html = write(bench, make_tables(bench, tmp_path, rows))
    assert html.count('src="data:image/png;base64,') >= 4
    assert "_hidden" in html and "a" * 80 in html
