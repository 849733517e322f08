"""A local batch of evals (sforge.evals.batch): packed under -j like the evaluate rule's
resources, the next container prepared while a judge runs, no Snakemake, and Ctrl-C stopping
the running judges without writing anything they did."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sforge.core.config import load_config
from sforge.core.errors import InfrastructureError
from sforge.evals import grade as targets
from sforge.evals.batch import grade_batch
from sforge.grading.capacity import judge_demand
from sforge.plan.pipeline import Pipeline
from tests.helpers.archives import archive
from tests.helpers.benches import copy_bench
from tests.helpers.paths import FIXTURES


# -- packing (no Docker: the two halves of targets.grade replaced by recorders) ---------------
def _targets(tmp_path: Path, cpus: dict[str, int], n: int) -> tuple[Pipeline, list]:
    copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    for task, c in cpus.items():
        toml = tmp_path / "bench" / "tasks" / task / "task.toml"
        toml.write_text(toml.read_text().replace("cpus = 1", f"cpus = {c}"))
    pipe = Pipeline.from_config(load_config(overrides={
        "benchmark": str(tmp_path / "bench"), "results": str(tmp_path / "results")}, env={}))
    out = [pipe.eval_target(task, f"{i:064x}", tmp_path / f"{task}{i}.tar.gz")
           for task in cpus for i in range(n)]
    return pipe, out


class Recorder:
    def __init__(self, jobs: int, fail: str = "", reading_s: float = 0.0):
        self.jobs = jobs
        self.reading_s = reading_s
        self.lock = threading.Lock()
        self.cores = self.most = self.running = self.most_running = 0
        self.events: list[tuple[str, str]] = []
        self.fail = fail

    def prepare(self, pipe, target, ahead=False):  # type: ignore[no-untyped-def]
        assert ahead
        with self.lock:
            self.events.append(("prepare", target.key))
        return targets.PendingGrade(target)

    def finish(self, pipe, pending, on_exit=None):  # type: ignore[no-untyped-def]
        need = min(judge_demand(pipe.bench.tasks[pending.target.task]).cores, self.jobs)
        with self.lock:
            self.cores += need
            self.running += 1
            self.most = max(self.most, self.cores)
            self.most_running = max(self.most_running, self.running)
            self.events.append(("start", pending.target.key))
        time.sleep(0.05)
        if pending.target.task == self.fail:  # before the judge stopped: holds its cores
            with self.lock:
                self.cores -= need
                self.running -= 1
            raise InfrastructureError("the daemon went away")
        with self.lock:
            self.cores -= need
            self.running -= 1
            self.events.append(("stop", pending.target.key))
        on_exit()
        time.sleep(self.reading_s)  # the result read and written, the container removed
        with self.lock:
            self.events.append(("end", pending.target.key))


@pytest.mark.parametrize("cpus,jobs,together", [({"alpha": 1}, 2, 2), ({"alpha": 2}, 2, 1),
                                                ({"alpha": 4}, 2, 1), ({"alpha": 1}, 1, 1),
                                                ({"alpha": 1, "beta": 2}, 3, 3)])
def test_judges_are_packed_by_cores_as_the_rule_declares(tmp_path, monkeypatch, cpus, jobs,
                                                         together):
    """-j N is N cores; a judge takes ceil(cpus) of them, capped at N as Snakemake caps a
    local job's threads; each eval is run once and reported once."""
    pipe, batch = _targets(tmp_path, cpus, 4)
    rec = Recorder(jobs)
    monkeypatch.setattr(targets, "prepare_grade", rec.prepare)
    monkeypatch.setattr(targets, "finish_grade", rec.finish)
    reported: list[tuple[str, object]] = []
    grade_batch(pipe, batch, jobs, lambda t, e: reported.append((t.key, e)))
    assert sorted(k for k, _ in reported) == sorted(t.key for t in batch)
    assert all(e is None for _, e in reported)
    assert rec.most <= jobs  # never more cores busy than -j
    assert rec.most_running == together  # and as many judges as fit
    assert [e for e, _ in rec.events].count("start") == len(batch)


def test_next_eval_is_prepared_before_the_current_ends_and_failures_go_on(tmp_path,
                                                                          monkeypatch):
    pipe, batch = _targets(tmp_path, {"alpha": 1, "beta": 1}, 3)
    rec = Recorder(1, fail="alpha", reading_s=0.3)
    monkeypatch.setattr(targets, "prepare_grade", rec.prepare)
    monkeypatch.setattr(targets, "finish_grade", rec.finish)
    reported: dict[str, object] = {}
    grade_batch(pipe, batch, 1, lambda t, e: reported.__setitem__(t.key, e))
    assert len(reported) == 6
    failed = [k for k, e in reported.items() if isinstance(e, InfrastructureError)]
    assert sorted(failed) == sorted(t.key for t in batch if t.task == "alpha")
    order = rec.events
    for before, after in zip(batch[3:], batch[4:], strict=False):  # beta's judges
        # prepared while the one before ran; started once it stopped, while its result
        # was still being read
        assert order.index(("prepare", after.key)) < order.index(("stop", before.key))
        assert order.index(("stop", before.key)) < order.index(("start", after.key)) < \
            order.index(("end", before.key))


# -- the real thing ----------------------------------------------------------------------------
SLEEPY_JUDGE = """#!/bin/sh
sleep {sleep}
n=$(cat answer.txt 2>/dev/null | tr -dc '0-9.' )
printf '{{"score": %s, "valid": true, "summary": "ok"}}' "${{n:-0}}" > /opt/sforge/result.json
"""


def _container_events(client, prefix: str, since: float) -> dict[str, dict[str, float]]:
    """create/start/die times (s) of the containers of images named `prefix`*."""
    seen: dict[str, dict[str, float]] = {}
    for ev in client.events(decode=True, since=int(since) - 1, until=int(time.time()) + 1,
                            filters={"type": "container"}):
        attrs = ev.get("Actor", {}).get("Attributes", {})
        if attrs.get("image", "").startswith(prefix) and ev["status"] in ("create", "start",
                                                                          "die"):
            seen.setdefault(ev["id"], {})[ev["status"]] = ev["timeNano"] / 1e9
    return seen


def _sleepy_batch(sf, sleep: float, n: int) -> None:
    """`n` archives for alpha, whose judge works `sleep` s; its images built."""
    (sf.bench / "tasks" / "alpha" / "judge" / "run.sh").write_text(SLEEPY_JUDGE.format(sleep=sleep))
    for i in range(n):
        archive(sf.bench / "submissions" / f"s{i}" / "alpha" / "r.tar.gz",
                {"answer.txt": str(i + 1)})
    sf.run("build", "--task", "alpha", check=True)


def _nosnake(tmp_path: Path) -> dict[str, str]:
    nosnake = tmp_path / "nosnake" / "snakemake"
    nosnake.mkdir(parents=True)
    (nosnake / "__init__.py").write_text("raise ImportError('Snakemake must not start')\n")
    return {"PYTHONPATH": str(nosnake.parent)}


@pytest.mark.docker
def test_local_batch_overlaps_containers_without_snakemake(minibench, docker_client, tmp_path):
    """-j 1 over three 1 s judges: never two judges at once, but each next container is
    created (and filled) while the previous judge runs; the images being built already,
    Snakemake is never imported."""
    _sleepy_batch(minibench, 1, 3)
    since = time.time()
    proc = minibench.run("grade", "-j", "1", "-v", env=_nosnake(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 graded, 0 failed" in proc.stdout
    assert "alpha  s2  score 3  ok" in proc.stderr.splitlines()
    runs = sorted(_container_events(docker_client, f"{minibench.name}.judge.", since).values(),
                  key=lambda e: e["start"])
    assert len(runs) == 3 and all(len(r) == 3 for r in runs), runs
    for before, after in zip(runs, runs[1:], strict=False):
        assert after["start"] >= before["die"]  # -j 1: one judge at a time
        assert after["create"] < before["die"]  # prepared while the previous one ran
    scores = sorted(json.loads(p.read_text())["score"]
                    for p in (minibench.results / minibench.name / "evals").glob("*/*.json"))
    assert scores == [1.0, 2.0, 3.0]


@pytest.mark.docker
def test_ctrl_c_stops_running_judges_and_writes_nothing_they_did(minibench, docker_client):
    """Ctrl-C during a judge: the process ends promptly with 130, the running judge's and
    the prepared container are removed, no result or claim is left; the next run grades
    every key once."""
    _sleepy_batch(minibench, 3, 2)
    cmd = [sys.executable, "-m", "sforge", "-b", str(minibench.bench), "--results",
           str(minibench.results), "grade", "-j", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    mine = {"label": f"sforge.owner.pid={proc.pid}"}
    deadline = time.monotonic() + 120
    while not docker_client.api.containers(filters={**mine, "status": "running"}):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()[-3000:]
    assert "stopping 1 running judge(s)" in err.decode()
    evals = minibench.results / minibench.name / "evals"
    assert list(evals.glob("*/*.json")) == []
    assert list(evals.glob("*/*.claim")) == []
    assert docker_client.api.containers(all=True, filters=mine) == []
    again = minibench.run("grade", check=True)
    assert "2 submission(s), 2 distinct: 0 up to date, 2 graded, 0 failed" in again.stdout
    assert sorted(json.loads(p.read_text())["score"] for p in evals.glob("*/*.json")) == \
        [1.0, 2.0]


@pytest.mark.docker
def test_no_judge_is_made_once_stopping(minibench, docker_client, monkeypatch):
    """After Ctrl-C began (stop_grading), a grade still on its way neither creates nor
    starts a judge container: it is stopped, not graded, and leaves no claim."""
    _sleepy_batch(minibench, 1, 1)
    pipe = Pipeline.from_config(load_config(overrides={
        "benchmark": str(minibench.bench), "results": str(minibench.results)}, env={}))
    (target,) = pipe.evals.values()
    mine = {"label": f"sforge.owner.pid={__import__('os').getpid()}"}
    stopping = threading.Event()
    monkeypatch.setattr(targets, "_stopping", stopping)
    pending = targets.prepare_grade(pipe, target, ahead=True)  # claimed, container made
    assert pending.judge is not None
    stopping.set()
    since = time.time()
    with pytest.raises(targets.GradingStopped):
        targets.finish_grade(pipe, pending)  # the prepared one never starts
    with pytest.raises(targets.GradingStopped):
        targets.grade(pipe, target)  # none is made
    assert docker_client.api.containers(all=True, filters=mine) == []
    seen = _container_events(docker_client, f"{minibench.name}.judge.", since)
    assert [e for e in seen.values() if "start" in e or e.get("create", 0) >= since] == []
    evals = minibench.results / minibench.name / "evals"
    assert list(evals.glob("*/*.json")) == [] and list(evals.glob("*/*.claim")) == []
