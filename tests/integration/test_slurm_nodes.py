"""Integration: grading on a multi-node SLURM whose nodes each have their OWN Docker daemon,
which starts without the judge images and pulls them from a registry on loopback
(scripts/slurm_nodes.sh: nodes n1, n2 as namespaces of this machine, config found through
SLURM_CONF, not /etc/slurm). Marked `slurm_nodes` (select or deselect with -m).
Set SFORGE_SKIP_SLURM=1 to skip knowingly.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.paths import REPO
from tests.helpers.slurm import copy_sentinels, make_batch, run, scores

pytestmark = pytest.mark.slurm_nodes

SCRIPT = REPO / "scripts" / "slurm_nodes.sh"
STATE = Path("/run/sforge-nodes")


@dataclass
class Cluster:
    env: dict[str, str]
    nodes: list[str]

    def docker(self, node: str, *args: str) -> str:
        sock = f"unix://{STATE}/{node}/docker.sock"
        proc = subprocess.run(["docker", "-H", sock, *args], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, f"docker on {node}: {proc.stderr}"
        return proc.stdout

    def tags(self, node: str, prefix: str) -> set[str]:
        out = self.docker(node, "images", "--format", "{{.Repository}}:{{.Tag}}")
        return {t for t in out.split() if t.startswith(f"{prefix}.")}

    def judge_containers(self, node: str) -> list[str]:
        return self.docker(node, "ps", "-a", "-q", "--filter", "label=sforge.judge").split()

    def state(self) -> str:
        """SLURM's view (jobs, nodes, the controller's last words): said when a test fails."""
        env = {**os.environ, **self.env}
        out = [subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
               for cmd in (["scontrol", "-o", "show", "job"], ["sinfo", "-N"])]
        log = STATE / "slurmctld.log"
        tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
        return "\n".join([*out, *tail])

    def script(self, *args: str) -> None:
        proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            pytest.fail(f"slurm_nodes.sh {' '.join(args)} failed:\n{proc.stderr}")


@pytest.fixture(scope="module")
def cluster(request):
    request.getfixturevalue("executor")  # SFORGE_SKIP_SLURM=1 skips; the plugin is installed
    c = Cluster({}, ["n1", "n2"])
    try:
        c.script("up", "2")
        out = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True,
                             check=True).stdout
        c.env = dict(re.findall(r"^export (\w+)=(\S+)$", out, re.M))
        assert not Path("/etc/slurm/slurm.conf").exists() or \
            c.env["SLURM_CONF"] != "/etc/slurm/slurm.conf"
        yield c
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, timeout=300)


class Events:
    """`docker events` of the judge containers on every node's daemon, while it runs. Into
    files, not pipes: a full pipe stalls the client and the daemon drops a slow listener."""

    def __init__(self, cluster: Cluster, where: Path):
        self.files = {n: where / f"events-{n}.jsonl" for n in cluster.nodes}
        self.procs = {n: subprocess.Popen(
            ["docker", "-H", f"unix://{STATE}/{n}/docker.sock", "events", "--filter",
             "label=sforge.judge", "--filter", "type=container", "--format", "{{json .}}"],
            stdout=self.files[n].open("w"), stderr=subprocess.DEVNULL)
            for n in cluster.nodes}
        time.sleep(0.5)

    def stop(self) -> dict[str, list[dict]]:
        out = {}
        for node, proc in self.procs.items():
            proc.terminate()
            proc.wait(timeout=10)
            out[node] = [json.loads(line) for line in self.files[node].read_text().splitlines()
                         if line.startswith("{")]
        return out


def sforge(sf, results: Path, env: dict, *args: str, timeout: float = 600):
    return run([sys.executable, "-m", "sforge", "-b", str(sf.bench), "--results",
                str(results), *args], cwd=sf.bench.parent, timeout=timeout, env=env)


def job_nodes(stderr: str, env: dict) -> dict[str, str]:
    """SLURM job id → the node it (last) ran on, for the jobs this run submitted."""
    ids = re.findall(r"submitted with SLURM jobid (\d+)", stderr)
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %N"],
                         capture_output=True, text=True, env={**os.environ, **env}).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def tasks_on(events: list[dict]) -> set[str]:
    return {e["Actor"]["Attributes"]["sforge.task"] for e in events if e["Action"] == "create"}


def test_two_nodes_pull_their_judges_and_grade_like_local(cluster, minibench, tmp_path):
    env = cluster.env
    expected = make_batch(minibench.bench, 24)  # 2 group jobs (judge: 20 per job)
    name, remote, local = minibench.name, minibench.results, tmp_path / "local"
    built = sforge(minibench, remote, env, "build", "--push", "-j", "2")
    assert "7 pushed" in built.stdout, built.stdout
    copy_sentinels(remote, local, name)
    for node in cluster.nodes:
        assert cluster.tags(node, name) == set()  # each node's daemon starts without them

    events = Events(cluster, tmp_path)
    report = sforge(minibench, remote, env, "report", "--profile", "slurm", timeout=900)
    seen = events.stop()
    sforge(minibench, local, {}, "report", "-j", "2")

    here, there = scores(local, name), scores(remote, name)
    pd.testing.assert_frame_equal(there, here)
    assert {(r.source, r.task, r.name): float(r.score) for r in there.itertuples()} == expected
    placed = job_nodes(report.stderr, env)
    assert set(placed.values()) == set(cluster.nodes), placed  # jobs on both nodes
    listed = json.loads(minibench.run("list", "--json", check=True).stdout)
    tags = {row["id"]: row["judge"] for row in listed["tasks"]}
    for node in cluster.nodes:
        graded = tasks_on(seen[node])
        assert graded, f"no judge ran on {node}"
        # the node's daemon pulled exactly the judge images of the tasks it graded
        assert cluster.tags(node, name) == {tags[t] for t in graded}, node
        assert cluster.judge_containers(node) == []


def slow_judges(bench: Path, seconds: float) -> None:
    for run_sh in (bench / "tasks").glob("*/judge/run.sh"):
        run_sh.write_text(run_sh.read_text() + f"sleep {seconds}\n")


def claims_of(evals: Path, node: str) -> dict[str, dict]:
    """The grading claims held now by SLURM jobs on `node`: eval key → claim record."""
    out = {}
    for path in evals.glob("*/*.claim"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # released (or being written) meanwhile
        if record.get("slurm_node") == node:
            out[path.stem] = record
    return out


def test_a_node_killed_mid_run_loses_nothing_and_grades_nothing_twice(cluster, minibench,
                                                                      tmp_path):
    env = cluster.env
    slow_judges(minibench.bench, 1)
    expected = make_batch(minibench.bench, 40)  # 2 jobs of 20, one per node, ~12 s each
    results = minibench.results
    sforge(minibench, results, env, "build", "--push", "-j", "2")
    events = Events(cluster, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sforge", "-b", str(minibench.bench), "--results", str(results),
         "grade", "--profile", "slurm"], cwd=minibench.bench.parent, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, **env})
    evals = results / minibench.name / "evals"
    victim, held = "n1", {}
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not held:
            running = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%N"], text=True,
                                     capture_output=True, env={**os.environ, **env}).stdout
            if len(list(evals.glob("*/*.json"))) >= 4 and \
                    set(running.split()) == set(cluster.nodes):
                held = claims_of(evals, victim)  # kill it while it is judging
            time.sleep(0.2)
        assert held, "the two jobs never ran side by side"
        cluster.script("kill", victim)
        graded_before = {p.stem for p in evals.glob("*/*.json")}
        dead = claims_of(evals, victim)  # the dead job's claims, left behind
        out, err = proc.communicate(timeout=600)
    except BaseException:
        print(cluster.state())  # shown with the failure
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
        raise
    seen = events.stop()
    assert proc.returncode == 0, err[-4000:]
    assert "40 submission(s), 40 distinct: 0 up to date, 40 graded, 0 failed" in out, out

    # every result arrived, with the judges' verdicts, each written once (a replaced result
    # would be in history/)
    got = {}
    for path in evals.glob("*/*.json"):
        data = json.loads(path.read_text())
        got[path.stem] = data["score"]
    assert len(got) == 40 and sorted(got.values()) == sorted(expected.values())
    assert not list(evals.glob("*/history/*")) and not list(evals.glob("*/*.claim"))

    # judge starts per key, from each daemon's events (not `destroy`: a daemon that refuses a
    # create, e.g. the writable-layer bound the judge asks for first, emits a destroy with no
    # create): a result written before the kill is never judged again; only a judge in
    # flight on the dead node (its claim left behind, its verdict never written) may have
    # started there and starts once more elsewhere
    starts = {node: collections.Counter(e["Actor"]["Attributes"]["sforge.key"] for e in evs
                                        if e["Action"] == "start")
              for node, evs in seen.items()}
    total = starts["n1"] + starts["n2"]
    assert set(total) == set(got), sorted(set(got) - set(total))
    assert len(graded_before) >= 4 and {k: total[k] for k in graded_before if total[k] != 1} \
        == {}
    again = {k: v for k, v in total.items() if v != 1}
    assert set(again) <= set(dead) and set(again.values()) <= {2}, (again, dead)
    assert all(starts[victim][k] == 1 for k in again), again

    # the dead job's claims record its SLURM run; SLURM said that run was over (the job was
    # requeued), so the requeued group took them over at once, long before their deadline
    assert dead, "the killed job held no claim"
    for key, record in dead.items():
        assert (record["slurm_node"], record["slurm_restarts"]) == (victim, "0"), record
        result = next(evals.glob(f"*/{key}.json"))
        assert result.stat().st_mtime < record["deadline"] - 120, (key, record)

    # the killed node comes back: its daemon still holds the containers the kill left; the
    # node's next job (here sforge doctor's) sweeps them
    cluster.script("start", victim)
    left = cluster.judge_containers(victim)
    doctor = subprocess.run(
        [sys.executable, "-m", "sforge", "-b", str(minibench.bench), "--results", str(results),
         "doctor", "--profile", "slurm"], cwd=minibench.bench.parent, text=True,
        capture_output=True, env={**os.environ, **env}, timeout=600)
    assert f"removed {len(left)} stale judge container(s)" in " ".join(doctor.stdout.split()) \
        if left else "no stale judge containers" in doctor.stdout, doctor.stdout
    for node in cluster.nodes:
        assert cluster.judge_containers(node) == [], node


def test_doctor_names_a_node_without_the_venvs_python(cluster, minibench):
    """The venv's python is a link to its base interpreter (here under /root/.pyenv): a node
    without that directory cannot start a job; doctor says which node and what to do."""
    for node in cluster.nodes:  # a node an earlier test killed (and failed before restarting)
        cluster.script("start", node)
    base = Path(sys.base_prefix)
    pid = (STATE / "n2" / "node.pid").read_text().strip()
    # hide the base interpreter from node n2 only (its own mount namespace)
    child = subprocess.run(["pgrep", "-P", pid], capture_output=True, text=True).stdout.split()
    assert child, "node n2 is not running"
    ns = ["nsenter", "--mount", "--target", child[0]]
    subprocess.run([*ns, "mount", "-t", "tmpfs", "tmpfs", str(base)], check=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "sforge", "-b", str(minibench.bench), "--results",
             str(minibench.results), "doctor", "--profile", "slurm", "--json"],
            cwd=minibench.bench.parent, text=True, capture_output=True,
            env={**os.environ, **cluster.env}, timeout=600)
    finally:
        subprocess.run([*ns, "umount", str(base)], check=True)
    assert proc.returncode == 1
    checks = {(c["node"], c["check"]): c for c in json.loads(proc.stdout)["checks"]}
    bad = checks[("n2", "python")]
    assert not bad["ok"], checks
    assert bad["detail"].startswith(f"the job could not start {REPO}/.venv/bin/python")
    assert f"install that Python at {base} on every node" in bad["fix"]
    assert checks[("n1", "python")]["ok"] and checks[("n1", "docker")]["ok"]
    # a job on n1 can ask SLURM about jobs (how a dead node's claims are taken over at once)
    assert checks[("n1", "slurm job")]["ok"], checks[("n1", "slurm job")]


@pytest.fixture(autouse=True)
def _no_docker_host(monkeypatch):
    # jobs inherit the submitting environment (sbatch --export=ALL): a DOCKER_HOST there
    # would point every node at one daemon
    monkeypatch.delenv("DOCKER_HOST", raising=False)

