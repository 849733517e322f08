"""Integration: what a grading job does on a cluster node, run here as the plain Snakemake
job a node runs (no sforge CLI around it): it sweeps the node's orphaned judge containers
before its first judge, pulls a judge image its daemon lacks from the registry by content
tag, and fails with a message naming node, image and registry when it cannot pull (never a
verdict). tests/integration/test_slurm_nodes.py proves the same on a multi-node SLURM."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import sys
import tarfile

import docker.errors
import pytest

from sforge.containers import owner
from tests.helpers.paths import REPO
from tests.helpers.servers import free_port

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def node_job(sf, *config: str, node: str | None = None) -> subprocess.CompletedProcess:
    """`snakemake grade` as a cluster job runs it: no CLI, images not re-checked. With
    `node`, under that hostname (its own UTS namespace), so that no other process's sweep on
    this host touches the containers labelled with it."""
    cmd = [sys.executable, "-m", "snakemake", "grade", "--cores", "1",
           "--directory", str(sf.results), "--config",
           f"benchmark={sf.bench}", f"results={sf.results}", *config]
    if node:
        cmd = ["unshare", "--uts", "sh", "-c", f'hostname {node} && exec "$@"', "node", *cmd]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def one_archive(sf) -> None:
    path = sf.bench / "submissions" / "agent" / "alpha" / "a.tar.gz"
    path.parent.mkdir(parents=True)
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("answer.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"7\n"))


def judge_tag(sf, client) -> str:
    # one listing call: images.list() inspects each image and races other tests' removals
    tags = {t for img in client.api.images() for t in img.get("RepoTags") or []}
    (tag,) = [t for t in tags if t.startswith(f"{sf.name}.judge.alpha:")]
    return tag


def evals(sf) -> list:
    return list((sf.results / sf.name / "evals").glob("*/*.json"))


def test_node_job_sweeps_orphans_and_pulls_its_judge(minibench, registry, docker_client):
    minibench.run("build", "--task", "alpha", check=True)
    minibench.run("--registry", registry, "push", "--task", "alpha", check=True)
    tag = judge_tag(minibench, docker_client)
    docker_client.images.remove(tag)  # this node's daemon lacks the judge image
    one_archive(minibench)
    dead = subprocess.Popen(["true"])
    dead.wait()
    node = f"node-{minibench.name}"
    orphan = docker_client.api.create_container("busybox:1.36", "true", labels={
        **owner.labels(), owner.OWNER_PID_LABEL: str(dead.pid),
        owner.OWNER_HOST_LABEL: node})["Id"]
    try:
        proc = node_job(minibench, f"registry={registry}", node=node)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with pytest.raises(docker.errors.NotFound):
            docker_client.api.inspect_container(orphan)
        assert f"removed stale judge container {orphan[:12]}" in proc.stderr
        assert f"pulled {registry}/{tag} on {node}" in proc.stderr
        assert docker_client.images.get(tag)  # under its local name
        assert len(evals(minibench)) == 1
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.api.remove_container(orphan, force=True)


def test_node_that_cannot_pull_fails_naming_node_image_registry(minibench, docker_client):
    minibench.run("build", "--task", "alpha", check=True)
    tag = judge_tag(minibench, docker_client)
    docker_client.images.remove(tag)
    one_archive(minibench)
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = node_job(minibench, f"registry={nowhere}")
    assert proc.returncode != 0
    line = next((ln for ln in proc.stderr.splitlines() if "cannot pull judge image" in ln),
                proc.stderr[-3000:])
    assert f"node {socket.gethostname()}" in line and tag in line and nowhere in line, line
    assert evals(minibench) == []  # no verdict written
    # without any registry: the same, saying none is configured
    proc = node_job(minibench)
    assert proc.returncode != 0
    assert f"node {socket.gethostname()}: judge image {tag} is not in its Docker daemon" \
        in proc.stderr and "no registry is configured" in proc.stderr
    assert evals(minibench) == []
