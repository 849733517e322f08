"""Shared fixtures. Integration tests use the real Docker daemon: when it is unreachable they
fail with a clear message (set SFORGE_SKIP_DOCKER=1 to skip them knowingly)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
# Tasks written for `sforge import` carry their own pytest files: data, not this suite's tests.
collect_ignore = ["import_fixtures"]

# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits
# SIGINT ignored, and so would every sforge it starts: the Ctrl-C tests need what a
# terminal gives. A handler here makes the commands it starts get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def docker_client():
    import docker

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


@dataclass
class Sforge:
    """A copy of a fixture benchmark under a unique name, and a runner for the CLI."""

    bench: Path
    results: Path
    name: str

    def run(self, *args: str, check: bool = False, env: dict | None = None,
            bench: Path | None = None, results: Path | None = None,
            stdin: bytes | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "sforge", "-b", str(bench or self.bench),
               "--results", str(results or self.results), *args]
        proc = subprocess.run(cmd, capture_output=True, input=stdin,
                              env={**os.environ, **(env or {})}, cwd=self.bench.parent)
        proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n"
                                 f"{proc.stderr}")
        return proc

    def sentinels(self) -> dict[str, Path]:
        """The newest sentinel of each image (older hashes stay on disk, unasked for)."""
        root = self.results / self.name / "images"
        paths = sorted(root.glob("*/*/*.json"), key=lambda p: p.stat().st_mtime_ns)
        return {f"{p.parent.parent.name}/{p.parent.name}": p for p in paths}


def copy_bench(src: Path, dest: Path) -> str:
    """Copy a fixture benchmark, renamed so that its images never collide with another test's."""
    shutil.copytree(src, dest, symlinks=True)
    name = f"t{uuid.uuid4().hex[:8]}"
    toml = dest / "benchmark.toml"
    text = toml.read_text()
    toml.write_text("\n".join(f'name = "{name}"' if line.startswith("name") else line
                              for line in text.splitlines()) + "\n")
    return name


def remove_images(client, prefix: str) -> None:
    """Remove this test's images by tag (one listing: others' images come and go meanwhile)."""
    import docker.errors

    for image in client.api.images():
        for tag in image.get("RepoTags") or []:
            if tag.startswith(f"{prefix}."):
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_image(tag, force=True)


@pytest.fixture
def minibench(tmp_path, docker_client):
    name = copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    yield Sforge(tmp_path / "bench", tmp_path / "results", name)
    remove_images(docker_client, name)


class RawServer:
    """A raw TCP server on loopback: `handle(conn)` runs in a thread per connection, which
    is closed after it. For upstreams that misbehave below HTTP."""

    def __init__(self, handle) -> None:
        import socket
        import threading

        self.handle = handle
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        with conn:
            self.handle(conn)

    def stop(self) -> None:
        """Wakes the accept first: a plain close() leaves a thread blocked in accept()
        holding the socket, which then listens on (and answers on) its port for the rest
        of the test session."""
        import contextlib
        import socket

        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self.sock.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def registry(tmp_path_factory, docker_client):
    """A real registry (Debian's docker-registry) on a loopback port, for the session."""
    import time
    import urllib.request

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
