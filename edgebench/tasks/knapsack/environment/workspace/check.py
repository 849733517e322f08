"""Run solve.py on examples/*.txt and report feasibility and value (as the grader would)."""

import subprocess
import sys
from pathlib import Path

OPTIMA = {"ex0": 720, "ex1": 2376, "ex2": 3828}

for path in sorted(Path("examples").glob("*.txt")):
    head, *rows = path.read_text().split("\n")
    n, capacity = map(int, head.split())
    items = [tuple(map(int, r.split())) for r in rows if r.strip()]
    with path.open() as fh:
        out = subprocess.run([sys.executable, "solve.py"], stdin=fh, capture_output=True,
                             text=True, timeout=10)
    chosen = [int(t) for t in out.stdout.split()]
    weight = sum(items[i][0] for i in chosen)
    value = sum(items[i][1] for i in chosen)
    ok = len(set(chosen)) == len(chosen) and weight <= capacity and out.returncode == 0
    print(f"{path.stem}: {'ok' if ok else 'INFEASIBLE'} value {value} "
          f"(optimum {OPTIMA[path.stem]}), weight {weight}/{capacity}")
