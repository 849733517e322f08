"""Time `sforge check --integrity` on EdgeBench beside `sforge build`'s no-op.

Both run through the CLI (a subprocess each, as a user runs them) against one results
directory: the build first (so every image is there), then the no-op build, then the
integrity check twice: cold (every probe judged) and warm (every eval key cached; only the
leak check and the workspace export run again). Prints the seconds of each.

    .venv/bin/python bench/bench_integrity.py [--results DIR] [--benchmark edgebench]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sforge(bench: Path, results: Path, *args: str) -> tuple[float, int, str]:
    """Seconds, exit code and the last line of output of one CLI call."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sforge", "-b", str(bench), "--results",
                           str(results), *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return time.perf_counter() - t0, proc.returncode, lines[-1] if lines else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default=str(ROOT / "edgebench"))
    ap.add_argument("--results", help="results directory (default: a temporary one)")
    args = ap.parse_args()
    bench = Path(args.benchmark)
    with tempfile.TemporaryDirectory(prefix="sforge-bench-integrity-") as tmp:
        results = Path(args.results or tmp)
        secs, rc, last = sforge(bench, results, "build")
        print(f"build (first)            {secs:7.2f} s  rc={rc}  {last}")
        secs, rc, last = sforge(bench, results, "build")
        print(f"build (no-op)            {secs:7.2f} s  rc={rc}  {last}")
        for label in ("check --integrity (cold)", "check --integrity (warm)"):
            secs, rc, last = sforge(bench, results, "check", "--integrity")
            print(f"{label:<24} {secs:7.2f} s  rc={rc}  {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
