"""Time the report at scale and how fast its index renders in headless Chromium.

Generates a benchmark of --tasks tasks and N eval results (bench/common.py's generator: every
tenth result invalid, five per-test details each), aggregates the tables into the results
folder, then:

  write_report cold      every task page rendered (result files read for their details)
  write_report unchanged task pages from the page cache
  write_report one edit  one result regraded: its task page alone is rendered again

and opens report.html (and the largest task page) in headless Chromium from file:// with
networking off, printing the load time the page itself measures (navigation start to the
end of the load event) next to the same figure for an empty page, and the page sizes.

Goal: for 100,000 results over 200 tasks, the index renders in ≤ 3 s.

    .venv/bin/python bench/bench_report.py [--n 100000] [--tasks 200] [--sources 5]
        [--dir DIR --reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import KINDS, make_results, make_scoring_benchmark

from sforge import scores
from sforge.benchmark.layout import Layout
from sforge.benchmark.loader import load_benchmark
from sforge.grading.results import EvalResult
from sforge.report.pages import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Records, once the load event has finished, how long the page took from navigation start.
PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var t = performance.getEntriesByType("navigation")[0];
  document.body.setAttribute("data-load-ms", String(t.loadEventEnd - t.startTime));
  document.body.setAttribute("data-dcl-ms", String(t.domContentLoadedEventEnd - t.startTime));
}, 0); });
</script>"""


def timed(label: str, fn, *args, **kw):  # type: ignore[no-untyped-def]
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  {label:<26} {wall:7.2f} s wall {cpu:7.2f} s cpu")
    return out


def render_ms(page: Path, profile: Path) -> tuple[float, float, float]:
    """(load ms, DOMContentLoaded ms, Chromium process wall s) for `page`."""
    probed = page.with_name(f".probed-{page.name}")
    probed.write_text(page.read_text().replace("<head>", "<head>\n" + PROBE, 1))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--window-size=1200,900", f"--user-data-dir={profile}",
           "--dump-dom", probed.as_uri()]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    probed.unlink()
    load = re.search(r'data-load-ms="([0-9.]+)"', proc.stdout)
    dcl = re.search(r'data-dcl-ms="([0-9.]+)"', proc.stdout)
    if not load or not dcl:
        raise SystemExit(f"no timing from Chromium for {page}:\n{proc.stderr[-1500:]}")
    return float(load.group(1)), float(dcl.group(1)), wall


def browser(pages: dict[str, Path], work: Path, repeat: int) -> dict[str, float]:
    blank = work / "blank.html"
    blank.write_text("<!DOCTYPE html><html><head><title>blank</title></head>"
                     "<body></body></html>")
    out = {}
    print(f"headless Chromium, median of {repeat} (load = navigation start → load event end):")
    for label, page in {"empty page": blank, **pages}.items():
        runs = [render_ms(page, work / "chromium-profile") for _ in range(repeat)]
        load = statistics.median(r[0] for r in runs)
        dcl = statistics.median(r[1] for r in runs)
        wall = statistics.median(r[2] for r in runs)
        size = page.stat().st_size
        print(f"  {label:<26} load {load / 1000:6.2f} s  DOMContentLoaded {dcl / 1000:6.2f} s  "
              f"(process {wall:5.2f} s; {size / 1e6:6.2f} MB)")
        out[label] = load / 1000
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="result files (default 100000)")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--sources", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="Chromium runs per page")
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse results already generated in --dir by the same arguments")
    args = ap.parse_args(argv)
    if CHROMIUM is None:
        raise SystemExit("headless Chromium not found (Debian: apt-get install chromium)")

    work = args.dir or Path(tempfile.mkdtemp(prefix="sforge-bench-report-"))
    stamp = work / "generated.json"
    want = {"n": args.n, "tasks": args.tasks, "sources": args.sources}
    results = work / "results"
    try:
        t0 = time.perf_counter()
        if args.reuse and stamp.exists() and json.loads(stamp.read_text()) == want:
            tasks = [(f"task_{i:04d}", list(KINDS)[i % len(KINDS)]) for i in range(args.tasks)]
            records = make_results(results, tasks, args.n, args.sources, write=False)
            print(f"reused {args.n} results in {work}")
        else:
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            tasks = make_scoring_benchmark(work / "bench", args.tasks)
            records = make_results(results, tasks, args.n, args.sources)
            stamp.write_text(json.dumps(want))
            print(f"generated {args.n} results, {len(records)} submissions, {args.tasks} tasks, "
                  f"{args.sources} sources in {time.perf_counter() - t0:.1f} s ({work})")
        bench = load_benchmark(work / "bench")
        lay = Layout(results)
        scores.write_scores(bench, records, lay.scores)
        scores.write_best(bench, lay.scores, lay.best)
        scores.write_leaderboard(bench, lay.best, lay.scores, lay.leaderboard,
                                 lay.leaderboard_md, lay.budgets)
        shutil.rmtree(results / "report", ignore_errors=True)
        shutil.rmtree(results / ".cache" / "report-pages", ignore_errors=True)

        tables = (bench, lay.scores, lay.best, lay.leaderboard, lay.budgets, lay.report)
        print("write_report:")
        pages = timed("cold (every task page)", write_report, *tables)
        timed("unchanged (page cache)", write_report, *tables)
        _, path = records[len(records) // 2]
        result = EvalResult.read(path)
        result.valid, result.score = True, (result.score or 0.0) + 1.0
        result.write(path)
        scores.write_scores(bench, records, lay.scores)
        timed("one result changed", write_report, *tables)

        sizes = sorted(p.stat().st_size for p in pages[1:])
        largest = max(pages[1:], key=lambda p: p.stat().st_size)
        print(f"pages: report.html {lay.report.stat().st_size / 1e6:.2f} MB; {len(sizes)} task "
              f"pages, median {statistics.median(sizes) / 1e6:.2f} MB, largest "
              f"{sizes[-1] / 1e6:.2f} MB, total {sum(sizes) / 1e6:.1f} MB")
        got = browser({"report.html (index)": lay.report,
                       f"largest task page ({largest.stem})": largest}, work, args.repeat)
        with open("/proc/loadavg") as fh:
            load = fh.read().split()[0]
        index = got["report.html (index)"]
        print(f"\nSUMMARY n={args.n}, {args.tasks} tasks (load average {load} on "
              f"{os.cpu_count()} cores): index renders in {index:.2f} s (goal ≤ 3 s: "
              f"{'met' if index <= 3 else 'NOT met'}), empty page {got['empty page']:.2f} s; "
              f"index {lay.report.stat().st_size / 1e6:.2f} MB")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
