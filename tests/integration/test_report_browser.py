"""report.html and the per-task pages render in a real browser: headless Chromium (Debian
package `chromium`) opens them from file:// URLs with networking features off, at a 400 px
wide window, with a probe script that records console errors, horizontal page scroll, the
smallest rendered plot text, and what the invalid section says; the DOM is dumped after load.
"""

from __future__ import annotations

import pytest

from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Benchmark
from tests.helpers.browser import CHROMIUM, probe_page, shoot
from tests.helpers.report_tables import EVIL, SAMPLE, TOO_BIG, make_tables, sample_report, write


@pytest.fixture(scope="module")
def pages(bench: Benchmark, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    """The sample report (drawing costs a second or two)."""
    return sample_report(bench, tmp_path_factory.mktemp("pages") / "results")



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




@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                    "(Debian: apt-get install -y chromium)")
def test_pages_in_headless_chromium_at_400px(pages, tmp_path):
    dom = probe_page(pages.report, PROBE, tmp_path / "chromium-profile")
    assert dom["errors"] == "none"
    assert int(dom["scroll-width"]) <= int(dom["client-width"]) <= 400
    assert TOO_BIG in dom["reasons"] and "summary of s2" in dom["reasons"]
    assert float(dom["min-text-px"]) >= 7  # plot text still legible at 400 px
    assert dom["sortable-ready"] == "5"  # the inline script ran on every table
    assert dom["board-sources"] == f"alpha | beta | {EVIL}"  # as text, not markup
    # a link of the invalid section resolves, and the task page it leads to renders too
    result = dom["result-href"]
    assert result.startswith("evals/") and (pages.root / result).is_file()
    page = dom["page-href"]
    assert page == "report/min_task.html"
    task = probe_page(pages.root / page, PROBE, tmp_path / "chromium-profile")
    assert task["errors"] == "none"
    assert int(task["scroll-width"]) <= int(task["client-width"]) <= 400
    assert TOO_BIG in task["reasons"]
    assert float(task["min-text-px"]) >= 7
    assert (pages.root / "report" / task["result-href"]).resolve().is_file()


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
        dom = probe_page(page, PROBE, profile, width)
        assert dom["errors"] == "none", page
        assert int(dom["scroll-width"]) <= width, page  # no page-wide overflow
        assert dom["spilled-tables"] == "none", page
        assert int(dom["svg-texts"]) > 10, page
        assert dom["clipped-text"] == "none", page
        if width == 400:
            assert float(dom["min-text-px"]) >= 9.5, page  # legible on a phone
        if page.stem != "report":  # a task page: the filter box leaves the failed tests
            assert dom["filter-rows"] == "2>1", page
    piece = (layout.root / "report" / "piece_task.html").read_text()
    assert piece.count('<g style="fill: none; stroke:') == 1  # a box for six points only
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"{n}-{width}.png" for n in ("report", "piece_task", "max_task"))
