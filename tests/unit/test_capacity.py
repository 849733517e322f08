"""Judge capacity: a local batch under -j, the judge service's queue and the Snakemake
evaluate rule count one judge alike (its [judge] cpus rounded up to whole cores, and its
memory), and each starts a judge only when both fit in what is free.

No Docker: the batch's two halves of grade.grade and the service's grading are replaced by
recorders that hold the judge until released; the Snakemake rule is read from a dry run of
plain `snakemake`."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from sforge.core.clock import now_iso
from sforge.core.config import load_config
from sforge.evals import grade
from sforge.evals.batch import grade_batch
from sforge.grading.capacity import machine_memory_mb
from sforge.plan.pipeline import Pipeline
from sforge.service.core import Service
from tests.helpers.benches import copy_bench
from tests.helpers.paths import FIXTURES, REPO


def _bench(tmp_path: Path, cpus: float, memory: str) -> Pipeline:
    """minibench with task alpha's judge asking for `cpus` and `memory`."""
    copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    toml = tmp_path / "bench" / "tasks" / "alpha" / "task.toml"
    text = toml.read_text().replace("cpus = 1", f"cpus = {cpus}")
    toml.write_text(text.replace('memory = "256m"', f'memory = "{memory}"'))
    return Pipeline.from_config(load_config(overrides={
        "benchmark": str(tmp_path / "bench"), "results": str(tmp_path / "results")}, env={}))


def _most_at_once_in_batch(pipe: Pipeline, n: int, jobs: int,
                           monkeypatch: pytest.MonkeyPatch) -> int:
    """Judges of `n` alpha evals running at once, at most, in `sforge grade -j jobs`."""
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def prepare(pipe, target, ahead=False):  # type: ignore[no-untyped-def]
        return grade.PendingGrade(target)

    def finish(pipe, pending, on_exit=None):  # type: ignore[no-untyped-def]
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        on_exit()

    monkeypatch.setattr(grade, "prepare_grade", prepare)
    monkeypatch.setattr(grade, "finish_grade", finish)
    batch = [pipe.eval_target("alpha", f"{i:064x}", Path(f"/nowhere/{i}.tar.gz"))
             for i in range(n)]
    errors: list[object] = []
    grade_batch(pipe, batch, jobs, lambda t, e: errors.append(e))
    assert errors == [None] * n
    return running[1]


def _started_at_once_by_service(pipe: Pipeline, n: int, capacity: float) -> int:
    """Judges the service starts at once from a queue of `n` alpha submissions, with
    `--max-concurrent capacity` on this machine."""
    svc = Service(pipe, max_concurrent=capacity, admin_token="admin")
    release = threading.Event()

    def grade(sub):  # type: ignore[no-untyped-def]
        release.wait(30)
        return {"task": sub["task"], "key": sub["key"], "valid": False}, False

    svc.scheduler.grade = grade
    task = pipe.bench.tasks["alpha"]
    ids = []
    for i in range(n):
        run_id = f"r{i}"
        svc.state.add_run(run_id, "alpha", "test", None, None, None, 0.0, now_iso(),
                          uuid.uuid4().hex, uuid.uuid4().hex)
        row = svc.state.accept(run_id, sha256=f"{i:064x}", archive=f"/nowhere/{i}.tar.gz",
                               key=f"{i:020x}", cpus=float(task.judge.cpus), final=False,
                               limits=svc.limits, now=time.time(), result=None)
        ids.append(row["id"])
    try:
        with svc.scheduler.cond:
            svc.scheduler._start_some()
        return sum((svc.state.submission(i) or {}).get("state") == "running" for i in ids)
    finally:
        release.set()
        svc.scheduler.join_judges(30)
        svc.state.close()


def _snakemake_resources(pipe: Pipeline, tmp_path: Path) -> tuple[int, int]:
    """(threads, mem_mb) of the evaluate job plain `snakemake grade -n` plans for an alpha
    archive."""
    sub = tmp_path / "bench" / "submissions" / "test" / "alpha"
    sub.mkdir(parents=True)
    (sub / "a.tar.gz").write_bytes(b"")
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "grade", "-n", "--cores", "8",
         "--directory", str(results), "--config", f"benchmark={tmp_path / 'bench'}",
         f"results={results}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = proc.stdout.split("rule evaluate:", 1)[1].split("rule grade:", 1)[0]
    threads = re.search(r"threads: (\d+)", job)
    mem_mb = re.search(r"\bmem_mb=(\d+)", job)
    assert mem_mb, job
    return int(threads.group(1)) if threads else 1, int(mem_mb.group(1))


@pytest.mark.parametrize("judge_memory,together", [("256m", 2), ("60%", 1)])
def test_service_starts_judges_only_within_the_machines_memory(tmp_path, judge_memory,
                                                              together):
    """Two 1-cpu judges under capacity 2 run together unless their memory together is more
    than the machine's: then the second waits."""
    if judge_memory == "60%":
        judge_memory = f"{machine_memory_mb() * 6 // 10}m"
    pipe = _bench(tmp_path, 1, judge_memory)
    assert _started_at_once_by_service(pipe, 2, capacity=2) == together


@pytest.mark.parametrize("cpus,memory,cores", [(1.5, "768m", 3), (0.5, "768m", 1),
                                               (1, "60%", 2)])
def test_batch_service_and_snakemake_hold_the_same_demand(tmp_path, monkeypatch, cpus,
                                                          memory, cores):
    """A judge holds the same cores and memory in a local batch (`-j cores`), in the
    service (capacity `cores`, the machine's memory) and in the evaluate rule's resources:
    the demand of one call, fractional cpus rounded up to whole cores."""
    if memory == "60%":
        memory = f"{machine_memory_mb() * 6 // 10}m"
    pipe = _bench(tmp_path, cpus, memory)
    in_batch = _most_at_once_in_batch(pipe, 3, cores, monkeypatch)
    in_service = _started_at_once_by_service(pipe, 3, cores)
    assert in_batch == in_service, (in_batch, in_service)

    from sforge.grading.capacity import judge_demand

    demand = judge_demand(pipe.bench.tasks["alpha"])
    assert demand.cores == math.ceil(cpus)
    assert in_batch == min(cores // demand.cores, machine_memory_mb() // demand.mem_mb)
    assert _snakemake_resources(pipe, tmp_path) == (demand.cores, demand.mem_mb)


def test_a_judge_larger_than_the_capacity_runs_alone():
    """A demand beyond the whole capacity is cut to it: it starts only when nothing else
    runs, and then nothing else starts beside it; a fractional capacity holds whole
    cores (at least one judge)."""
    from sforge.grading.capacity import Capacity, JudgeDemand

    cap = Capacity.of(2.5, 1000)
    assert (cap.cores, cap.mem_mb) == (2, 1000)
    small, big = JudgeDemand(1, 100), JudgeDemand(4, 5000)
    held = cap.take(small)
    assert not cap.fits(big)
    cap.release(held)
    assert cap.fits(big)
    assert cap.take(big) == JudgeDemand(2, 1000)
    assert not cap.fits(small)
    assert Capacity.of(0.5, 1000).fits(JudgeDemand(1, 1))
