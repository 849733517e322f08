"""The eval path's container calls need no Docker SDK: create, start, wait, read a file and
remove through the engine's standard-library transport, against the real daemon."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.docker
def test_container_calls_import_no_docker_sdk(docker_client) -> None:
    """create, start, wait, read a file, remove: all without `import docker`."""
    code = """
import sys
from sforge.containers.docker import DockerEngine
from sforge.containers.engine import ContainerSpec
engine = DockerEngine()
assert engine.image_id("busybox:1.36")
cid = engine.create_container(ContainerSpec(
    image="busybox:1.36", command=("sh", "-c", "echo hi > /x"), cwd="/", env={},
    labels={"sforge.test": "engine_http"}, cpus=0.5, memory=64 << 20))
try:
    engine.start(cid)
    assert engine.wait(cid, 30) == 0
    found = engine.read_file(cid, "/x", 100)
    assert found is not None and found.data == b"hi\\n", found
finally:
    assert engine.remove_container(cid)
print("docker" in sys.modules, "requests" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
