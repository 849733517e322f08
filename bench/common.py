"""Helpers for the bench scripts: timing a command, running sforge as a user would."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SFORGE = [sys.executable, "-m", "sforge"]


def timed(cmd: list[str], repeat: int = 1, check: bool = True, **kw) -> float:
    """Median wall time of `cmd` over `repeat` runs, process start included."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
        times.append(time.perf_counter() - start)
        if check and proc.returncode != 0:
            raise SystemExit(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return statistics.median(times)


def sforge(bench: Path, results: Path, *args: str) -> list[str]:
    return [*SFORGE, "-b", str(bench), "--results", str(results), *args]


def remove_images(prefix: str, docker_host: str | None = None) -> list[str]:
    """Remove the images tagged `<prefix>*` by tag, never by ID: generated benchmarks share
    layers (and so image IDs) through the build cache, and removing an ID removes every
    tag on it, another benchmark's included. → the tags removed."""
    env = {**os.environ, "DOCKER_HOST": docker_host} if docker_host else None
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                          "--filter", f"reference={prefix}*"],
                         capture_output=True, text=True, env=env).stdout.split()
    tags = sorted({t for t in out if not t.endswith(":<none>")})
    if tags:
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, env=env)
    return tags


def row(label: str, seconds: float, goal: str = "") -> None:
    print(f"  {label:58} {seconds:8.3f} s  {goal}")
