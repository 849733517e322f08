"""The report's runs pages in a real browser: `sforge report` on a results folder with hand-made
run folders (tests.helpers.run_folders), then headless Chromium (Debian package `chromium`)
takes screenshots of runs.html and a run page at 1280 and 400 px wide and, with a probe
script, checks at 400 px that the page does not scroll sideways with every message open,
that the hostile transcript stayed text, and that the search box filters and highlights."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from html import unescape
from pathlib import Path

import pytest

from tests.helpers import paths
from tests.helpers.cli import sforge
from tests.helpers.run_folders import make_runs

pytestmark = pytest.mark.browser

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)

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
  out["client-width"] = String(d.clientWidth);
  out["errors"] = window.__errors.join(" | ") || "none";
  window.parent.postMessage(out, "*");
});
</script>"""

# --dump-dom keeps windows at least 500 px wide: the page runs in a 400 px iframe, which is
# its viewport, and reports back by postMessage.
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


def chromium(url: str, profile: Path, width: int, *extra: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", f"--window-size={width},900",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", *extra, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def screenshot(page: Path, out: Path, profile: Path, width: int) -> None:
    chromium(page.as_uri(), profile, width, f"--screenshot={out}")
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (width, 900)


def probe(page: Path, profile: Path, width: int = 400) -> dict[str, str]:
    """The probe's findings for `page` (a copy beside it: relative links still work)."""
    probed = page.with_name(f".probed-{page.name}")
    probed.write_text(page.read_text().replace("<head>", "<head>\n" + PROBE, 1))
    harness = page.with_name(f".harness-{page.name}")
    harness.write_text(HARNESS.format(src=probed.name, width=width))
    try:
        dom = chromium(harness.as_uri(), profile, 800, "--dump-dom")
    finally:
        probed.unlink()
        harness.unlink()
    div = re.search(r'<div[^>]*data-probed="yes"[^>]*>', dom)
    assert div, dom[-2000:]
    return {k: unescape(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', div.group(0))}


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
    found = probe(runs, profile)
    assert found["errors"] == "none", found
    assert int(found["scroll-width"]) <= int(found["client-width"]) <= 400, found
    assert found["hostile-bold"] == "0"
    found = probe(run, profile)
    assert found["errors"] == "none", found
    # every message open, and no sideways scroll
    assert int(found["scroll-width"]) <= int(found["client-width"]) <= 400, found
    assert found["hostile-bold"] == "0"  # the agent's markup stayed text
    # "needle" is in one tool result: that item alone is shown, in its call, highlighted
    assert (found["items-shown"], found["calls-shown"]) == ("1", "1"), found
    assert found["marks"] == "needle|needle"  # in its summary's preview and its text
    assert int(found["items-after-clear"]) > 5 and found["marks-after-clear"] == "0"
