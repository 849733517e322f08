"""`sforge plan` over a generated 1,000-task benchmark, nothing built: cold and warm hash cache.

Goal (issue: build DAG): ≤ 5 s cold, ≤ 2 s warm.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import row, sforge, timed
from genbench import make_benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench, results = Path(tmp) / "bench", Path(tmp) / "results"
        make_benchmark(bench, args.n, name="planbench")
        files = sum(1 for p in bench.rglob("*") if p.is_file())
        time.sleep(2.1)  # files younger than 2 s are never cached (racy mtimes)
        print(f"sforge plan over {args.n} tasks ({files} files), nothing built")
        cold = timed(sforge(bench, results, "plan"))
        warm = timed(sforge(bench, results, "plan"), repeat=3)
        shutil.rmtree(results)
        cold2 = timed(sforge(bench, results, "plan"))
        row("cold (no hash cache)", min(cold, cold2), "goal ≤ 5 s")
        row("warm (hash cache: a stat per file)", warm, "goal ≤ 2 s")
        row("list --json (warm)", timed(sforge(bench, results, "list", "--json")))


if __name__ == "__main__":
    main()
