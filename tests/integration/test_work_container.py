"""The work container of an `internet = false` run: a probe inside it tries the host's
addresses, docker0, another container and an outside address, and fails on each; only the
judge service, through sforge's Unix socket, answers. The same probe in a bridge container
reaches the host, so the probe can tell."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sforge.containers.docker import DockerEngine
from sforge.runs.container import WorkContainer, WorkSpec
from sforge.runs.helper import helper_binary
from sforge.runs.proxy import HostSockets

pytestmark = pytest.mark.docker

IMAGE = "python:3.11-slim-bookworm"
OUTSIDE = "192.0.2.1"  # TEST-NET-1: documentation only, never routed

PROBE = r"""
import json, socket, sys
out = {}
for name, host, port in json.loads(sys.argv[1]):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port)); s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        out[name] = "reached: " + s.recv(100).decode(errors="replace")[:40]
    except OSError as exc:
        out[name] = "failed: " + str(exc)
    finally:
        s.close()
u = socket.socket(socket.AF_UNIX)
u.settimeout(5)
try:
    u.connect("/run/sforge/service.sock"); u.sendall(b"GET /health HTTP/1.0\r\n\r\n")
    out["service"] = "reached: " + u.recv(200).decode(errors="replace")
except OSError as exc:
    out["service"] = "failed: " + str(exc)
print(json.dumps(out))
"""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def host_server():
    """An HTTP server on every host address (0.0.0.0), as careless host services are."""
    server = ThreadingHTTPServer(("0.0.0.0", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def neighbour(docker_client):
    c = docker_client.containers.run("busybox:1.36", ["httpd", "-f", "-p", "8080"],
                                     detach=True, labels={"sforge.test": "neighbour"})
    c.reload()
    net = c.attrs["NetworkSettings"]
    yield net["IPAddress"], net["Gateway"]  # the gateway is docker0, the host's side
    c.remove(force=True)


def _host_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if ":" not in a]


def _probe(client, tmp_path: Path, internet: bool, targets, service_url: str) -> dict:
    folder = tmp_path / ("net" if internet else "none")
    folder.mkdir()
    host = HostSockets(folder, service_url, None)
    host.start()
    box = WorkContainer(DockerEngine(client), WorkSpec(
        image=IMAGE, cwd="/work", env={}, helper=helper_binary(), socket_dir=folder,
        internet=internet, labels={"sforge.test": "probe"}))
    try:
        box.start()
        code, out = box.run(["python3", "-c", PROBE, json.dumps(targets)], check=False)
        assert code == 0, out
        return json.loads(out.decode().strip().splitlines()[-1])
    finally:
        box.remove()
        host.stop()


def test_no_internet_reaches_only_the_service(docker_client, tmp_path, host_server, neighbour):
    neighbour, gateway = neighbour
    targets = [("docker0", gateway, host_server), ("container", neighbour, 8080),
               ("outside", OUTSIDE, 80)]
    targets += [(f"host {a}", a, host_server) for a in _host_addresses()]
    service = f"http://127.0.0.1:{host_server}"

    isolated = _probe(docker_client, tmp_path, False, targets, service)
    for name, *_ in targets:
        assert isolated[name].startswith("failed"), (name, isolated[name])
    assert isolated["service"].startswith("reached: HTTP/1.0 200"), isolated["service"]

    # control: on Docker's bridge the same probe reaches the host and the neighbour
    bridged = _probe(docker_client, tmp_path, True, targets[:2], service)
    assert bridged["docker0"].startswith("reached: HTTP/1.0 200"), bridged
    assert bridged["container"].startswith("reached"), bridged


def test_container_removed_and_swept(docker_client, tmp_path):
    from sforge.containers.owner import sweep_stale_containers
    from sforge.runs.container import HELPER_DIR, RUN_LABEL, SOCKET_DIR

    box = WorkContainer(DockerEngine(docker_client), WorkSpec(
        image="busybox:1.36", cwd="/w", env={}, helper=helper_binary(), socket_dir=tmp_path,
        labels={"sforge.test": "sweep", "sforge.owner.pid": "999999999"}))
    box.start()
    cid = box.id
    # the lockdown a work container is created with
    attrs = docker_client.api.inspect_container(cid)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["Init"] is True
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == WorkSpec.pids_limit and not host["CapDrop"]
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "16m"}}
    assert {m["Destination"]: m["RW"] for m in attrs["Mounts"]} == {
        SOCKET_DIR: False, **{f"{HELPER_DIR}/sforge-{n}": False
                              for n in ("submit", "helper", "game")}}
    assert attrs["Config"]["Labels"][RUN_LABEL] == "1"
    # a dead owner's container (kill -9 of sforge) goes at the next run's sweep
    assert cid in sweep_stale_containers(DockerEngine(docker_client), RUN_LABEL)
    assert not docker_client.containers.list(all=True, filters={"id": cid,
                                                                  "label": RUN_LABEL})
    box.remove()  # already gone: no error


def test_socket_folder_is_read_only_to_the_agent(docker_client, tmp_path):
    """/run/sforge is a host folder: root in the work container must not write there (a
    setuid file or gigabytes on the host). Its sockets still connect: the probe test above
    reaches the service through the same read-only mount."""
    folder = tmp_path / "sockets"
    folder.mkdir()
    (folder / "prompt.md").write_text("the prompt\n")
    host = HostSockets(folder, "http://127.0.0.1:9", None)  # nothing listens: connect only
    host.start()
    box = WorkContainer(DockerEngine(docker_client), WorkSpec(
        image="busybox:1.36", cwd="/w", env={}, helper=helper_binary(), socket_dir=folder,
        labels={"sforge.test": "ro-sockets"}))
    try:
        box.start()
        code, out = box.run(["sh", "-c", "cp /bin/busybox /run/sforge/sh && chmod 4755 "
                             "/run/sforge/sh; echo x > /run/sforge/prompt.md; "
                             "rm -f /run/sforge/service.sock; cat /run/sforge/prompt.md"],
                            check=False)
        assert b"Read-only file system" in out, out
        assert b"the prompt" in out, out  # still readable
        assert sorted(p.name for p in folder.iterdir()) == ["prompt.md", "service.sock"]
        assert (folder / "prompt.md").read_text() == "the prompt\n"
    finally:
        box.remove()
        host.stop()


def test_a_fork_bomb_stays_in_its_container(docker_client, tmp_path):
    """The agent's processes are bounded (the host, the service and other runs share the
    kernel's process table); the default bound is the judge's."""
    from sforge.grading.judge_container import ContainerLimits

    assert WorkSpec(image="x", cwd="/", env={}, helper=tmp_path,
                    socket_dir=tmp_path).pids_limit == ContainerLimits().pids
    box = WorkContainer(DockerEngine(docker_client), WorkSpec(
        image="busybox:1.36", cwd="/w", env={}, helper=helper_binary(), socket_dir=tmp_path,
        labels={"sforge.test": "pids"}, pids_limit=40))
    try:
        box.start()
        # counted with shell builtins only: at the bound, nothing more can be started
        code, out = box.run(["sh", "-c", "(n=0; while [ $n -lt 100 ]; do sleep 30 & "
                             "n=$((n+1)); done) 2>/dev/null; set -- /proc/[0-9]*; echo $#"],
                            check=False)
        processes = int(out.decode().split()[-1])
        assert 0 < processes <= 40, out  # not the 100 asked for
    finally:
        box.remove()
