"""Grading figures (issue: grading), each beside its floor measured in the same run.

- `sforge grade -j 1` of 50 archives vs 50 sequential `docker run --rm` of the same judge
  image and command: goal ≤ 1.3×;
- one `sforge eval` of a trivial judge, start to finish, process start included: ≤ 1 s;
- 200 archives against a judge that works 1 s with 1 CPU, -j 2 on 2 cores: wall ≤ 1.2 ×
  the ideal (200 × 1 s / 2 = 100 s);
- re-running the fully graded batch of 200: ≤ 2 s.
"""

from __future__ import annotations

import argparse
import io
import json
import tarfile
import tempfile
import time
from pathlib import Path

from common import remove_images, row, sforge, timed
from genbench import make_benchmark


def write_archive(path: Path, answer: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        data = answer.encode()
        info = tarfile.TarInfo("answer.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def batch(bench: Path, n: int, tasks: list[str]) -> None:
    for i in range(n):
        write_archive(bench / "submissions" / f"src{i % 4}" / tasks[i % len(tasks)]
                      / f"run{i}.tar.gz", f"{i % 10}.{i}")



def per_eval(tmp: Path, n: int) -> None:
    name = f"gradebench{int(time.time())}"
    bench, results = tmp / "b1", tmp / "r1"
    tasks = make_benchmark(bench, 5, name=name)
    try:
        timed(sforge(bench, results, "build", "-j", "2"))
        batch(bench, n, tasks)
        judge = json.loads(next((results / name / "images" / "judge").glob("*/*.json"))
                           .read_text())["tag"]
        floor = timed(["sh", "-c", " ; ".join(
            [f"docker run --rm --network none -w /work {judge} sh /judge/run.sh"] * n)])
        grade = timed(sforge(bench, results, "grade", "-j", "1"))
        print(f"per-eval cost, batch of {n}, -j 1")
        row(f"floor: {n} sequential `docker run --rm`", floor, f"{floor / n:.3f} s each")
        row(f"`sforge grade -j 1` of {n} archives", grade,
            f"{grade / n:.3f} s each; {grade / floor:.2f}× floor (goal ≤ 1.3×)")
        sub = tmp / "one.tar.gz"
        write_archive(sub, "4.2")
        one = timed(sforge(bench, results, "eval", "--task", tasks[0], "--archive", str(sub)))
        run1 = timed(["docker", "run", "--rm", "--network", "none", "-w", "/work", judge,
                      "sh", "/judge/run.sh"])
        row("one `sforge eval`, start to finish", one, "goal ≤ 1 s")
        row("  floor: one `docker run --rm` of that judge", run1)
    finally:
        remove_images(name)


def parallel(tmp: Path, n: int, jobs: int) -> None:
    name = f"parbench{int(time.time())}"
    bench, results = tmp / "b2", tmp / "r2"
    tasks = make_benchmark(bench, 10, name=name, work_s=1, cpus=1)
    try:
        timed(sforge(bench, results, "build", "-j", "2"))
        batch(bench, n, tasks)
        wall = timed(sforge(bench, results, "grade", "-j", str(jobs)))
        ideal = n * 1.0 / jobs
        print(f"{n} archives, judge works 1 s with 1 CPU, -j {jobs}")
        row("ideal (work / cores)", ideal)
        row(f"`sforge grade -j {jobs}`", wall, f"{wall / ideal:.2f}× ideal (goal ≤ 1.2×)")
        rerun = timed(sforge(bench, results, "grade"), repeat=3)
        row(f"re-running the fully graded batch of {n}", rerun, "goal ≤ 2 s")
    finally:
        remove_images(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--parallel-n", type=int, default=200)
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--skip-parallel", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        per_eval(Path(tmp), args.n)
        if not args.skip_parallel:
            parallel(Path(tmp), args.parallel_n, args.j)


if __name__ == "__main__":
    main()
