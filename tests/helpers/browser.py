"""Headless Chromium for the report's browser tests: a page in a viewport of a given width,
its screenshot, and what a probe script found on it."""

from __future__ import annotations

import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)

# Headless Chromium keeps windows at least 500 px wide: the page runs in an iframe of the
# width asked for, which is its viewport, and reports back by postMessage.
HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:{height}px;border:0"></iframe>
<script>
window.addEventListener("message", function (e) {{
  var div = document.createElement("div");
  Object.keys(e.data).forEach(function (k) {{ div.setAttribute("data-" + k, e.data[k]); }});
  div.setAttribute("data-probed", "yes");
  document.body.appendChild(div);
}});
</script></body></html>"""


def chromium(url: str, profile: Path, width: int, height: int, *extra: str) -> str:
    """Headless Chromium on `url` in a `width` x `height` window; its stdout."""
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", f"--window-size={width},{height}",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", *extra, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def shoot(page: Path, profile: Path, width: int, png: Path, height: int = 2400) -> None:
    """A screenshot of `page` in a `width` px viewport (the harness' iframe) to `png`."""
    harness = page.with_name(f".shot-{page.name}")
    harness.write_text(HARNESS.format(src=page.name, width=width, height=height))
    try:
        chromium(harness.as_uri(), profile, max(width, 500), height, f"--screenshot={png}")
    finally:
        harness.unlink()
    assert png.is_file() and png.stat().st_size > 1000


def probe_page(page: Path, script: str, profile: Path, width: int = 400) -> dict[str, str]:
    """What `script` (put first in <head> of a copy of `page` beside it, so relative links
    still work) posted about the page in a `width` px viewport."""
    probed = page.with_name(f".probed-{page.name}")
    probed.write_text(page.read_text().replace("<head>", "<head>\n" + script, 1))
    harness = page.with_name(f".harness-{page.name}")
    harness.write_text(HARNESS.format(src=probed.name, width=width, height=900))
    try:
        dom = chromium(harness.as_uri(), profile, 800, 1000, "--dump-dom")
    finally:
        probed.unlink()
        harness.unlink()
    div = re.search(r'<div[^>]*data-probed="yes"[^>]*>', dom)
    assert div, dom[-2000:]
    return {k: unescape(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', div.group(0))}
