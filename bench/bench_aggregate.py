"""Time the score aggregation at scale: N eval results → scores.csv, best.csv, leaderboard.

Generates a benchmark of --tasks tasks (all twelve rescale kinds, several categories) and N
eval result JSONs (as sforge.results.EvalResult writes them) with Submission records from
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
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sforge import scores  # noqa: E402
from sforge.loader import load_benchmark  # noqa: E402
from sforge.results import EvalResult  # noqa: E402
from sforge.submissions import Submission  # noqa: E402

# kind → (table parameters, direction, a raw-score sampler around the anchors)
KINDS = {
    "linear": ({"lower": 0.0, "upper": 100.0}, "maximize", lambda g: g.uniform(-10, 120)),
    "min_linear": ({"baseline": 100.0, "expert": 10.0}, "minimize", lambda g: g.uniform(0, 150)),
    "min_linear_positive": ({"baseline": 100.0, "expert": 10.0}, "minimize",
                            lambda g: g.uniform(-5, 150)),
    "min_inverse_anchor": ({"anchor_raw": 2.0, "anchor_score": 50.0}, "minimize",
                           lambda g: g.uniform(0.5, 10)),
    "compression_ratio_cropped_guarded": ({"baseline": 1.0, "expert": 0.2}, "minimize",
                                          lambda g: g.uniform(0.0, 1.2)),
    "log_anchor": ({"anchor_raw": 1000.0, "anchor_score": 60.0}, "maximize",
                   lambda g: g.lognormvariate(5, 2)),
    "log_max": ({"baseline": 10.0, "expert": 1000.0}, "maximize",
                lambda g: g.lognormvariate(4, 2)),
    "log1p_max": ({"baseline": 5.0, "upper": 500.0}, "maximize",
                  lambda g: g.lognormvariate(3, 2)),
    "log_min": ({"baseline": 1000.0, "expert": 10.0}, "minimize",
                lambda g: g.lognormvariate(4, 2)),
    "piecewise_max": ({"baseline": 0.0, "rank30": 47169682940.0, "rank1": 49702568341.0,
                       "super_anchor": 5e10}, "maximize", lambda g: g.uniform(-1e9, 5.2e10)),
    "piecewise_min": ({"baseline": 100.0, "rank30": 50.0, "rank1": 20.0, "super_anchor": 10.0},
                      "minimize", lambda g: g.uniform(0, 120)),
    "piecewise_log_min": ({"baseline": 1e4, "rank30": 1e3, "rank1": 1e2, "super_anchor": 10.0},
                          "minimize", lambda g: g.lognormvariate(6, 2)),
}
CATEGORIES = ("optimization", "systems", "ml", "games", "compression")
START = datetime(2025, 1, 1, tzinfo=UTC)


def toml_value(v: object) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def make_benchmark(root: Path, n_tasks: int) -> list[tuple[str, str]]:
    """Write benchmark.toml and the task directories; returns (task id, kind) pairs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmark.toml").write_text('name = "benchagg"\n')
    tasks = []
    kinds = list(KINDS)
    for i in range(n_tasks):
        tid, kind = f"task_{i:04d}", kinds[i % len(kinds)]
        params, direction, _ = KINDS[kind]
        table = ", ".join([f'kind = "{kind}"'] + [f"{k} = {toml_value(v)}"
                                                 for k, v in params.items()])
        tdir = root / "tasks" / tid
        for sub in ("environment", "judge"):
            (tdir / sub).mkdir(parents=True)
            (tdir / sub / "Dockerfile").write_text("FROM scratch\n")
        (tdir / "task.toml").write_text(
            f'id = "{tid}"\ncategory = "{CATEGORIES[i % len(CATEGORIES)]}"\n\n'
            f'[judge]\ncmd = "true"\n\n[score]\ndirection = "{direction}"\n'
            f"rescale = {{ {table} }}\n")
        tasks.append((tid, kind))
    return tasks


def make_results(root: Path, tasks: list[tuple[str, str]], n: int, n_sources: int,
                 seed: int = 1, write: bool = True) -> list[tuple[Submission, Path]]:
    """N result files (indent-2 JSON, like EvalResult.write) and their records; every 50th
    submission is an identical archive from another source and shares a result file.
    With write=False only the records (same random sequence, same paths)."""
    g = random.Random(seed)
    sources = [f"run-{chr(97 + s)}" for s in range(n_sources)]
    per_pair: dict[tuple[str, str], float] = {}
    records: list[tuple[Submission, Path]] = []
    for i in range(n):
        source = sources[i % n_sources]
        tid, kind = tasks[(i // n_sources) % len(tasks)]
        elapsed = per_pair.get((source, tid), 0.0) + g.uniform(60, 3600)
        per_pair[(source, tid)] = elapsed
        sha = hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()
        key = sha[:20]
        valid = g.random() > 0.1
        score = KINDS[kind][2](g)
        graded = START + timedelta(seconds=elapsed + 30)
        result = EvalResult(
            task=tid, submission=sha, key=key, valid=valid,
            score=score if valid or g.random() < 0.5 else None,
            summary=f"{g.randint(0, 50)}/50 cases ok",
            details=[{"name": f"case_{j:04d}", "status": "PASSED", "score": 1.0}
                     for j in range(5)],
            reason=None if valid else "grader said invalid",
            duration_s=round(g.uniform(1, 60), 3),
            started_at=(graded - timedelta(seconds=20)).isoformat(),
            finished_at=graded.isoformat(),
            judge_image=f"benchagg.judge.{tid}:0123456789ab",
        )
        path = root / "evals" / tid / f"{key}.json"
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        sub = Submission(source=source, task=tid, name=f"sub-{i:07d}", path=root / f"{i}.tar.gz",
                         sha256=sha, submitted_at=(START + timedelta(seconds=elapsed)).isoformat(),
                         elapsed_s=elapsed, agent="agent-x", model=f"model-{i % n_sources}")
        records.append((sub, path))
        if i % 50 == 49:  # the same archive submitted by another source: one result file
            other = sources[(i + 1) % n_sources]
            records.append((Submission(source=other, task=tid, name=f"dup-{i:07d}",
                                       path=sub.path, sha256=sha, elapsed_s=elapsed,
                                       submitted_at=sub.submitted_at), path))
    return records


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
            tasks = make_benchmark(work / "bench", args.tasks)
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
            from sforge.report import write_report

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
