"""report.html and the per-task pages render in a real browser: headless Chromium (Debian
package `chromium`) opens them from file:// URLs with networking features off, at a 400 px
wide window, with a probe script that records console errors, horizontal page scroll, the
smallest rendered plot text, and what the invalid section says; the DOM is dumped after load.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Benchmark
from tests.helpers.report_tables import EVIL, SAMPLE, TOO_BIG, make_tables, sample_report, write


@pytest.fixture(scope="module")
def pages(bench: Benchmark, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    """The sample report (drawing costs a second or two)."""
    return sample_report(bench, tmp_path_factory.mktemp("pages") / "results")


CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)

# Put first in <head> of a copy of a page: records console errors and uncaught exceptions,
# then at load the page's horizontal overflow, the smallest plot text on screen, what the
# invalid section and the leaderboard say, and posts all of it to the harness page.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
(function () { var orig = console.error; console.error = function () {
  window.__errors.push(Array.prototype.join.call(arguments, " ")); orig.apply(console, arguments);
}; })();
window.addEventListener("load", function () {
  var b = document.body, d = document.documentElement, out = {};
  out["scroll-width"] = String(Math.max(d.scrollWidth, b.scrollWidth));
  out["client-width"] = String(d.clientWidth);
  var least = 1e9;
  document.querySelectorAll("svg.plot text").forEach(function (t) {
    var h = t.getBoundingClientRect().height; if (h > 0 && h < least) { least = h; } });
  out["min-text-px"] = String(least);
  // SVG text outside its figure (clipped): each text's box on screen within its svg's
  var clipped = [];
  document.querySelectorAll("svg.plot").forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    svg.querySelectorAll("text").forEach(function (t) {
      var r = t.getBoundingClientRect();
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5
          || r.bottom > box.bottom + 0.5) { clipped.push(t.textContent); } }); });
  out["clipped-text"] = clipped.join(" | ") || "none";
  out["svg-texts"] = String(document.querySelectorAll("svg.plot text").length);
  // tables wider than the page scroll inside their own container
  var spill = [];
  document.querySelectorAll("table").forEach(function (t) {
    var wrap = t.closest(".scroll");
    if (t.getBoundingClientRect().right > d.clientWidth + 0.5
        && !(wrap && wrap.clientWidth <= d.clientWidth)) { spill.push(t.id || t.className); } });
  out["spilled-tables"] = spill.join(" | ") || "none";
  // a filter box hides the rows without its text
  var box = document.querySelector("input.filter");
  if (box) {
    var table = box.nextElementSibling.querySelector("table");
    var before = table.querySelectorAll("tbody tr:not([hidden])").length;
    box.value = "FAILED"; box.dispatchEvent(new Event("input"));
    out["filter-rows"] = before + ">" + table.querySelectorAll("tbody tr:not([hidden])").length;
    box.value = ""; box.dispatchEvent(new Event("input"));
  }
  function texts(sel) { return Array.prototype.map.call(document.querySelectorAll(sel),
    function (e) { return e.textContent.trim(); }).join(" | "); }
  function attr(sel, name) { var e = document.querySelector(sel);
    return e ? e.getAttribute(name) : ""; }
  out["reasons"] = texts("#invalid-table td.reason");
  out["board-sources"] = texts("#leaderboard-table tbody td:nth-child(2)");
  out["sortable-ready"] = String(document.querySelectorAll("table.sortable.ready").length);
  out["result-href"] = attr("#invalid-table a.result-json", "href");
  out["page-href"] = attr("#invalid-table td:first-child a", "href");
  out["errors"] = window.__errors.join(" | ") || "none";
  window.parent.postMessage(out, "*");
});
</script>"""

# Headless Chromium keeps windows at least 500 px wide: the page runs in a 400 px iframe,
# which is its viewport, and reports back by postMessage.
HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:900px;border:0"></iframe>
<script>
window.addEventListener("message", function (e) {{
  var div = document.createElement("div");
  Object.keys(e.data).forEach(function (k) {{ div.setAttribute("data-" + k, e.data[k]); }});
  div.setAttribute("data-probed", "yes");
  document.body.appendChild(div);
}});
</script></body></html>"""


def shoot(page: Path, profile: Path, width: int, png: Path) -> None:
    """A screenshot of `page` in a `width` px viewport (the harness' iframe) to `png`."""
    harness = page.with_name(f".shot-{page.name}")
    harness.write_text(HARNESS.replace("height:900px", "height:2400px")
                       .format(src=page.name, width=width))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", f"--window-size={max(width, 500)},2400",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000",
           f"--screenshot={png}", harness.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    harness.unlink()
    assert proc.returncode == 0 and png.is_file() and png.stat().st_size > 1000, \
        proc.stderr[-2000:]


def browse(page: Path, profile: Path, width: int = 400) -> str:
    """The probe's findings for `page` in a `width` px viewport of headless Chromium."""
    probed = page.with_name(f".probed-{page.name}")  # same folder: relative links still work
    probed.write_text(page.read_text().replace("<head>", "<head>\n" + PROBE, 1))
    harness = page.with_name(f".harness-{page.name}")
    harness.write_text(HARNESS.format(src=probed.name, width=width))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", "--window-size=800,1000",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
           harness.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    probed.unlink()
    harness.unlink()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'data-probed="yes"' in proc.stdout, proc.stdout[-1000:]
    return proc.stdout


def probe(dom: str, name: str) -> str:
    found = re.search(rf'data-{name}="([^"]*)"', dom)
    assert found, name
    return unescape(found.group(1))


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                    "(Debian: apt-get install -y chromium)")
def test_pages_in_headless_chromium_at_400px(pages, tmp_path):
    dom = browse(pages.report, tmp_path / "chromium-profile")
    assert probe(dom, "errors") == "none"
    assert int(probe(dom, "scroll-width")) <= int(probe(dom, "client-width")) <= 400
    assert TOO_BIG in probe(dom, "reasons") and "summary of s2" in probe(dom, "reasons")
    assert float(probe(dom, "min-text-px")) >= 7  # plot text still legible at 400 px
    assert probe(dom, "sortable-ready") == "5"  # the inline script ran on every table
    assert probe(dom, "board-sources") == f"alpha | beta | {EVIL}"  # as text, not markup
    # a link of the invalid section resolves, and the task page it leads to renders too
    result = probe(dom, "result-href")
    assert result.startswith("evals/") and (pages.root / result).is_file()
    page = probe(dom, "page-href")
    assert page == "report/min_task.html"
    task = browse(pages.root / page, tmp_path / "chromium-profile")
    assert probe(task, "errors") == "none"
    assert int(probe(task, "scroll-width")) <= int(probe(task, "client-width")) <= 400
    assert TOO_BIG in probe(task, "reasons")
    assert float(probe(task, "min-text-px")) >= 7
    assert (pages.root / "report" / probe(task, "result-href")).resolve().is_file()


# Six repeats of one source on piece_task (raw scores around 4e10: long tick labels) and a
# hostile-named source with one point: a box for the first, points alone for the other.
RICH = [*SAMPLE, *[("run-long-name-0", "piece_task", 43623268300.0 + 1e9 * i, True, 600.0 * i)
                   for i in range(6)]]


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                    "(Debian: apt-get install -y chromium)")
@pytest.mark.parametrize("width", [1280, 400])
def test_screenshots_fit_the_width_with_no_clipped_plot_text(bench, tmp_path, width):
    layout = make_tables(bench, tmp_path / "results", RICH)
    write(bench, layout)
    profile = tmp_path / "chromium-profile"
    for page in (layout.report, layout.root / "report" / "piece_task.html",
                 layout.root / "report" / "max_task.html"):
        shoot(page, profile, width, tmp_path / f"{page.stem}-{width}.png")
        dom = browse(page, profile, width)
        assert probe(dom, "errors") == "none", page
        assert int(probe(dom, "scroll-width")) <= width, page  # no page-wide overflow
        assert probe(dom, "spilled-tables") == "none", page
        assert int(probe(dom, "svg-texts")) > 10, page
        assert probe(dom, "clipped-text") == "none", page
        if width == 400:
            assert float(probe(dom, "min-text-px")) >= 9.5, page  # legible on a phone
        if page.stem != "report":  # a task page: the filter box leaves the failed tests
            assert probe(dom, "filter-rows") == "2>1", page
    piece = (layout.root / "report" / "piece_task.html").read_text()
    assert piece.count('<g style="fill: none; stroke:') == 1  # a box for six points only
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"{n}-{width}.png" for n in ("report", "piece_task", "max_task"))
