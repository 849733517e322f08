"""What the SLURM tests share: a command run in its own process group, a batch of graded
archives with the scores they should get, and the scores table without its timing columns."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import pandas as pd

TIMING = ["graded_at", "duration_s"]  # the only columns allowed to differ between runs


def run(cmd: list[str], *, cwd: Path, timeout: float = 600,
        env: dict | None = None) -> subprocess.CompletedProcess:
    """Run cmd in its own process group; on timeout the whole group is stopped."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # Snakemake cancels its SLURM jobs on SIGINT
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        raise AssertionError(f"{cmd} timed out after {timeout} s:\n{out[-3000:]}\n"
                             f"{err[-3000:]}") from None
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{out[-3000:]}\n"
                             f"{err[-5000:]}")
    return result


def make_batch(bench: Path, n: int) -> dict[tuple[str, str, str], float]:
    """n archives <bench>/submissions/<source>/<task>/<name>.tar.gz with answer.txt = a number;
    returns (source, task, name) → the score the fixture's judges give."""
    tasks = sorted(p.name for p in (bench / "tasks").iterdir())
    expected = {}
    for i in range(n):
        source, task, name = f"agent{i % 3}", tasks[i % len(tasks)], f"try{i:02d}"
        value = (i * 7) % 11
        data = f"{value}\n".encode()
        path = bench / "submissions" / source / task / f"{name}.tar.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            info = tarfile.TarInfo("answer.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        expected[(source, task, name)] = float(value)
    return expected


def scores(results: Path, name: str) -> pd.DataFrame:
    """The benchmark's scores.csv as text, without its timing columns, in a fixed order."""
    frame = pd.read_csv(results / name / "scores.csv", dtype=str, keep_default_na=False)
    return frame.drop(columns=TIMING).sort_values(["source", "task", "name"]) \
        .reset_index(drop=True)


def copy_sentinels(src: Path, dest: Path, name: str) -> None:
    """Give results folder dest the image sentinels of src (the images are made once)."""
    shutil.copytree(src / name / "images", dest / name / "images")
