"""Generate a synthetic benchmark of N small tasks on busybox:1.36, for the bench scripts."""

from __future__ import annotations

import argparse
from pathlib import Path

TASK_TOML = """id = "{id}"
name = "Generated {id}"
version = "1.0.0"
category = "{category}"
status = "active"

[environment]
base = "tiny"
cwd = "/work"

[submission]
paths = ["answer.txt"]

[judge]
cmd = "sh /judge/run.sh"
timeout_sec = 60
cpus = {cpus}
memory = "128m"

[score]
direction = "maximize"
rescale = {{ kind = "linear", lower = 0.0, upper = 10.0 }}
"""

RUN_SH = """#!/bin/sh
# task {id}: score = the number in answer.txt, after working {work} s
sleep {work}
mkdir -p /opt/sforge
n=$(tr -dc '0-9.' < answer.txt 2>/dev/null)
printf '{{"score": %s, "valid": true, "summary": "ok"}}' "${{n:-0}}" > /opt/sforge/result.json
"""


def make_benchmark(root: Path, n: int, name: str = "genbench", work_s: float = 0,
                   cpus: int = 1, files: int = 4) -> list[str]:
    (root / "bases" / "tiny").mkdir(parents=True, exist_ok=True)
    (root / "benchmark.toml").write_text(f'name = "{name}"\n')
    (root / "bases" / "tiny" / "Dockerfile").write_text("FROM busybox:1.36\nRUN mkdir -p /work\n")
    ids = []
    for i in range(n):
        tid = f"task{i:04d}"
        ids.append(tid)
        t = root / "tasks" / tid
        (t / "environment").mkdir(parents=True, exist_ok=True)
        (t / "judge").mkdir(parents=True, exist_ok=True)
        (t / "task.toml").write_text(TASK_TOML.format(id=tid, category=f"cat{i % 5}", cpus=cpus))
        (t / "instruction.md").write_text(f"Task {tid}: write a number into answer.txt.\n")
        (t / "environment" / "Dockerfile").write_text(
            "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY environment/workspace /work\n")
        (t / "environment" / "workspace").mkdir(exist_ok=True)
        for f in range(files):
            (t / "environment" / "workspace" / f"file{f}.txt").write_text(f"{tid} {f}\n" * 50)
        (t / "judge" / "Dockerfile").write_text(
            "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY environment/workspace /work\n"
            "COPY judge/run.sh /judge/run.sh\n")
        (t / "judge" / "run.sh").write_text(RUN_SH.format(id=tid, work=work_s))
        for f in range(files):
            (t / "judge" / f"hidden{f}.txt").write_text(f"hidden {tid} {f}\n" * 50)
    return ids


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root", type=Path)
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--name", default="genbench")
    args = ap.parse_args()
    make_benchmark(args.root, args.n, args.name)
