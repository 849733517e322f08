"""Time the score aggregation at scale: N eval results → scores.csv, best.csv, leaderboard.

Generates a benchmark of --tasks tasks (all twelve rescale kinds, several categories) and N
eval result JSONs (as sforge.grading.results.EvalResult writes them) with Submission records from
several sources, then times write_scores / write_best / write_leaderboard:

  cold       no parse cache (every result file is parsed)
  unchanged  same inputs again (cache hits only)
  one edit   one result file rewritten with a new score, then everything again

Goal: cold ≤ 10 s for 100,000 results on a 2-core machine.

    .venv/bin/python bench/bench_aggregate.py [--n 100000] [--tasks 200] [--sources 5]
        [--dir DIR --reuse] [--report]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import KINDS, make_results, make_scoring_benchmark

from sforge import scores
from sforge.benchmark.loader import load_benchmark
from sforge.grading.results import EvalResult


def timed(label: str, fn, *args) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Wall and CPU seconds: on a shared machine the CPU time is the steadier figure."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  {label:<18} {wall:7.2f} s wall {cpu:7.2f} s cpu")
    return wall, cpu


def aggregate(bench, records, out: Path, title: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    print(title)
    steps = [
        timed("write_scores", scores.write_scores, bench, records, out / "scores.csv"),
        timed("write_best", scores.write_best, bench, out / "scores.csv", out / "best.csv"),
        timed("write_leaderboard", scores.write_leaderboard, bench, out / "best.csv",
              out / "scores.csv", out / "leaderboard.csv", out / "leaderboard.md",
              out / "budgets.csv", list(scores.DEFAULT_BUDGETS_H)),
    ]
    wall, cpu = sum(w for w, _ in steps), sum(c for _, c in steps)
    print(f"  {'total':<18} {wall:7.2f} s wall {cpu:7.2f} s cpu")
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="result files (default 100000)")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--sources", type=int, default=5)
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse results already generated in --dir by the same arguments")
    ap.add_argument("--report", action="store_true", help="also time write_report")
    args = ap.parse_args(argv)

    work = args.dir or Path(tempfile.mkdtemp(prefix="sforge-bench-agg-"))
    stamp = work / "generated.json"
    want = {"n": args.n, "tasks": args.tasks, "sources": args.sources}
    try:
        t0 = time.perf_counter()
        if args.reuse and stamp.exists() and json.loads(stamp.read_text()) == want:
            tasks = [(f"task_{i:04d}", list(KINDS)[i % len(KINDS)]) for i in range(args.tasks)]
            records = make_results(work / "results", tasks, args.n, args.sources, write=False)
            print(f"reused {args.n} results in {work}")
        else:
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            tasks = make_scoring_benchmark(work / "bench", args.tasks)
            records = make_results(work / "results", tasks, args.n, args.sources)
            stamp.write_text(json.dumps(want))
            print(f"generated {args.n} results, {len(records)} submissions, {args.tasks} tasks, "
                  f"{args.sources} sources in {time.perf_counter() - t0:.1f} s ({work})")
        t0 = time.perf_counter()
        bench = load_benchmark(work / "bench")
        print(f"load_benchmark: {time.perf_counter() - t0:.2f} s")
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)

        cold = aggregate(bench, records, out, "cold (no parse cache):")
        again = aggregate(bench, records, out, "unchanged inputs (parse cache):")
        # one result regraded: a new file (atomic write, new inode) with a better score
        sub, path = records[len(records) // 2]
        result = EvalResult.read(path)
        result.valid, result.score = True, (result.score or 0.0) + 1.0
        result.write(path)
        edit = aggregate(bench, records, out, "after one result changed:")
        if args.report:
            from sforge.report.pages import write_report

            print("report:")
            timed("write_report", write_report, bench, out / "scores.csv", out / "best.csv",
                  out / "leaderboard.csv", out / "budgets.csv", out / "report.html")
            print(f"  report.html {(out / 'report.html').stat().st_size / 1e6:.1f} MB")
        with open("/proc/loadavg") as fh:
            load = fh.read().split()[0]
        print(f"\nSUMMARY n={args.n} (wall / cpu s; load average {load} on {os.cpu_count()} "
              f"cores): cold {cold[0]:.2f} / {cold[1]:.2f}, unchanged {again[0]:.2f} / "
              f"{again[1]:.2f}, one result changed {edit[0]:.2f} / {edit[1]:.2f}")
        print(scores.leaderboard_text(out / "leaderboard.csv"))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
