"""The report's runs pages in a real browser: `sforge report` on a results folder with hand-made
run folders (tests.helpers.run_folders), then headless Chromium (Debian package `chromium`)
takes screenshots of runs.html and a run page at 1280 and 400 px wide and, with a probe
script, checks at 400 px that the page does not scroll sideways with every message open, that a
run's state shows without scrolling the runs table (at 1280 px: every column),
that the hostile transcript stayed text, and that the search box filters and highlights."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from tests.helpers import paths
from tests.helpers.browser import CHROMIUM, chromium, probe_page
from tests.helpers.cli import sforge
from tests.helpers.run_folders import make_runs

pytestmark = pytest.mark.browser


# First in <head> of a copy of a page: errors recorded; at load every <details> opened (the
# widest the page gets), its width measured, then the search box given "needle" and what
# it left visible counted; the findings go on <html> for --dump-dom.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
window.alert = function (m) { window.__errors.push("alert: " + m); };
window.addEventListener("load", function () {
  var d = document.documentElement, out = {};
  document.querySelectorAll("details").forEach(function (e) { e.open = true; });
  out["scroll-width"] = String(d.scrollWidth);
  out["hostile-bold"] = String(document.querySelectorAll("details b, td b").length);
  var box = document.getElementById("search");
  if (box) {
    box.value = "needle"; box.dispatchEvent(new Event("input"));
    var shown = Array.prototype.filter.call(document.querySelectorAll("details.item"),
      function (e) { return !e.hidden; });
    out["items-shown"] = String(shown.length);
    out["marks"] = Array.prototype.map.call(document.querySelectorAll("mark"),
      function (m) { return m.textContent; }).join("|");
    out["calls-shown"] = String(Array.prototype.filter.call(
      document.querySelectorAll("details.call"), function (e) { return !e.hidden; }).length);
    box.value = ""; box.dispatchEvent(new Event("input"));
    out["items-after-clear"] = String(Array.prototype.filter.call(
      document.querySelectorAll("details.item"), function (e) { return !e.hidden; }).length);
    out["marks-after-clear"] = String(document.querySelectorAll("mark").length);
  }
  ["state", "error"].forEach(function (name) {
    var th = Array.prototype.filter.call(document.querySelectorAll("#runs-table th"),
      function (h) { return h.textContent.trim() === name; })[0];
    if (th) out[name + "-right"] = String(Math.round(th.getBoundingClientRect().right));
  });
  out["client-width"] = String(d.clientWidth);
  out["errors"] = window.__errors.join(" | ") || "none";
  window.parent.postMessage(out, "*");
});
</script>"""




def screenshot(page: Path, out: Path, profile: Path, width: int) -> None:
    chromium(page.as_uri(), profile, width, 900, f"--screenshot={out}")
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (width, 900)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sforge report` of the scores fixture with four hand-made runs: → the results root."""
    tmp = tmp_path_factory.mktemp("runs-report")
    bench, results = tmp / "bench", tmp / "results"
    shutil.copytree(paths.FIXTURES / "scores_bench", bench)
    root = results / "scoresbench"
    make_runs(root)
    proc = sforge("-b", str(bench), "--results", str(results), "report")
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                    "(Debian: apt-get install -y chromium)")
def test_runs_pages_in_headless_chromium(report, tmp_path):
    index = (report / "report.html").read_text()
    assert 'id="runs-link" href="report/runs.html"' in index
    runs = report / "report" / "runs.html"
    run = report / "report" / "runs" / "r1" / "min_task-1.html"
    profile = tmp_path / "chromium-profile"
    for page in (runs, run):
        for width in (1280, 400):
            screenshot(page, tmp_path / f"{page.stem}-{width}.png", profile, width)
    found = probe_page(runs, PROBE, profile)
    assert found["errors"] == "none", found
    assert int(found["scroll-width"]) <= int(found["client-width"]) <= 400, found
    assert found["hostile-bold"] == "0"
    # a run's state is in sight at 400 px without scrolling the table (columns as `sforge runs`)
    assert int(found["state-right"]) <= int(found["client-width"]), found
    # and at 1280 px every column, the error last, fits without scrolling the table
    wide = probe_page(runs, PROBE, profile, width=1280)
    assert int(wide["error-right"]) <= int(wide["client-width"]) - 40, wide  # body margin
    found = probe_page(run, PROBE, profile)
    assert found["errors"] == "none", found
    # every message open, and no sideways scroll
    assert int(found["scroll-width"]) <= int(found["client-width"]) <= 400, found
    assert found["hostile-bold"] == "0"  # the agent's markup stayed text
    # "needle" is in one tool result: that item alone is shown, in its call, highlighted
    assert (found["items-shown"], found["calls-shown"]) == ("1", "1"), found
    assert found["marks"] == "needle|needle"  # in its summary's preview and its text
    assert int(found["items-after-clear"]) > 5 and found["marks-after-clear"] == "0"
