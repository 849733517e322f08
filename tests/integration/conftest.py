"""Fixtures of the integration tests: the real Docker daemon (when it is unreachable they
fail with a clear message; set SFORGE_SKIP_DOCKER=1 to skip them knowingly), a copy of the
fixture benchmark minibench with the CLI over it, a real registry, the SLURM executor."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request

import docker
import docker.errors
import pytest

from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.paths import FIXTURES
from tests.helpers.servers import free_port


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    """The Docker daemon of this host, with the base image the fixtures build on."""
    if os.environ.get("SFORGE_SKIP_DOCKER") == "1":
        pytest.skip("SFORGE_SKIP_DOCKER=1")
    try:
        client = docker.from_env(version="auto")
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Docker daemon unreachable ({exc}); run scripts/setup.sh first")
    for image in ("busybox:1.36",):
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            pytest.fail(f"base image {image} missing; run scripts/setup_base_images.sh")
    return client


@pytest.fixture
def minibench(tmp_path, docker_client):
    """The CLI over a copy of fixtures/minibench under a unique name; its images removed after."""
    name = copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    yield Sforge(tmp_path / "bench", tmp_path / "results", name)
    remove_images(docker_client, name)


@pytest.fixture(scope="session")
def registry(tmp_path_factory, docker_client):
    """A real registry (Debian's docker-registry) on a loopback port, for the session."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail("docker-registry missing: apt-get install docker-registry "
                    "(scripts/setup.sh does)")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(f"""version: 0.1
storage:
  filesystem:
    rootdirectory: {root / "data"}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
""")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=open(root / "registry.log", "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}/v2/"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text()}")
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def executor():
    """The profile's executor plugin, installed where Snakemake finds it."""
    if os.environ.get("SFORGE_SKIP_SLURM") == "1":
        pytest.skip("SFORGE_SKIP_SLURM=1")
    try:  # an import that only probes whether the plugin is installed
        import snakemake_executor_plugin_sforge_slurm  # noqa: F401
    except ImportError:
        pytest.fail("the sforge-slurm executor is not installed: "
                    ".venv/bin/pip install ./profiles/slurm/plugin")
