#!/usr/bin/python3
"""Grader for `knapsack`: run the submission's solve.py on every hidden instance and sum
the value of the feasible solutions. Writes /opt/sforge/result.json (the Judge Contract).

An instance whose solution is missing, malformed, infeasible, crashes or times out scores
0; a missing solve.py scores 0 everywhere (a valid score of 0, not a rejection).
The submission runs as `nobody` with a scrubbed environment, fed the instance on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

JUDGE = Path("/judge")
RESULT = Path("/opt/sforge/result.json")
TIME_LIMIT_S = 10.0  # wall clock per instance; reference DP needs < 1 s
NOBODY = 65534
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


def write_result(**result: object) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


def parallelism() -> int:
    # SFORGE_CPUS is the container's CPU limit; nproc would report the host's cores.
    try:
        return max(1, int(float(os.environ.get("SFORGE_CPUS", "1"))))
    except ValueError:
        return 1


def read_instance(path: Path) -> tuple[int, list[tuple[int, int]]]:
    head, *rows = path.read_text().split("\n")
    n, capacity = map(int, head.split())
    items = [tuple(map(int, r.split())) for r in rows if r.strip()]
    assert len(items) == n, path
    return capacity, items  # type: ignore[return-value]


def solve(path: Path) -> dict[str, object]:
    name = path.stem
    capacity, items = read_instance(path)
    user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    try:
        with path.open("rb") as stdin:
            proc = subprocess.run(["/usr/bin/python3", "solve.py"], stdin=stdin,
                                  capture_output=True, timeout=TIME_LIMIT_S, env=ENV, **user)
    except subprocess.TimeoutExpired:
        return {"name": name, "status": "FAILED", "score": 0, "message": "time limit exceeded"}
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return {"name": name, "status": "FAILED", "score": 0,
                "message": f"exit code {proc.returncode}: {tail[0][:200]}"}
    try:
        chosen = [int(tok) for tok in proc.stdout.split()]
    except ValueError:
        return {"name": name, "status": "FAILED", "score": 0,
                "message": "output is not a list of integers"}
    if len(set(chosen)) != len(chosen):
        return {"name": name, "status": "FAILED", "score": 0, "message": "an item is repeated"}
    if any(not 0 <= i < len(items) for i in chosen):
        return {"name": name, "status": "FAILED", "score": 0, "message": "item index out of range"}
    weight = sum(items[i][0] for i in chosen)
    if weight > capacity:
        return {"name": name, "status": "FAILED", "score": 0,
                "message": f"over capacity: weight {weight} > {capacity}"}
    value = sum(items[i][1] for i in chosen)
    return {"name": name, "status": "PASSED", "score": value,
            "message": f"value {value}, weight {weight}/{capacity}"}


def main() -> None:
    instances = sorted((JUDGE / "instances").glob("*.txt"))
    optima = json.loads((JUDGE / "optima.json").read_text())
    if not Path("solve.py").is_file():
        write_result(score=0, valid=True, summary="no solve.py in the submission: score 0",
                     details=[{"name": p.stem, "status": "FAILED", "score": 0} for p in instances],
                     metrics={"optimum_total": sum(optima.values())})
        return
    subprocess.run(["chmod", "-R", "a+rX", "."], check=False)  # readable by `nobody`
    with ThreadPoolExecutor(parallelism()) as pool:
        details = list(pool.map(solve, instances))
    total = sum(int(d["score"]) for d in details)
    best = sum(optima.values())
    ok = sum(d["status"] == "PASSED" for d in details)
    write_result(score=total, valid=True,
                 summary=f"{ok}/{len(details)} feasible; total value {total} "
                         f"(optimum {best}, {100 * total / best:.2f}%)",
                 details=details, metrics={"optimum_total": best, "feasible": ok})


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a grader bug must still leave a verdict behind
        write_result(valid=False, summary=f"grader error: {exc!r}", details=[], metrics={})
        raise SystemExit(f"grader error: {exc!r}") from None
