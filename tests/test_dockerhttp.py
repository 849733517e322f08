"""The read-only listings sforge makes straight over the daemon's socket agree with
docker-py's, and fail as docker-py's calls do."""

from __future__ import annotations

import pytest

from sforge import dockerhttp
from sforge.engine import DockerEngine, EngineError


def test_socket_listings_agree_with_docker_py(docker_client):
    fast, sdk = DockerEngine(), DockerEngine(client=docker_client)
    tags = ["busybox:1.36", "sforge-test-absent.judge.x:000000000000"]
    assert fast.existing_tags(tags) == sdk.existing_tags(tags) == {"busybox:1.36"}
    assert "client" not in fast.__dict__  # no docker-py client was made for it
    docker_client.containers.create("busybox:1.36", "true",
                                    labels={"sforge-test-http": "yes"})
    try:
        assert fast.containers("sforge-test-http=yes") == sdk.containers("sforge-test-http=yes")
        assert len(fast.containers("sforge-test-http=yes")) == 1
    finally:
        for c in docker_client.containers.list(all=True,
                                               filters={"label": "sforge-test-http=yes"}):
            c.remove(force=True)


def test_a_dead_socket_is_an_unreachable_daemon(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(EngineError, match="cannot reach the Docker daemon") as err:
        DockerEngine().containers("anything")
    assert err.value.unreachable


def test_only_a_local_socket_is_spoken_to_directly(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert dockerhttp.socket_path() is None
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/other.sock")
    assert dockerhttp.socket_path() == "/run/other.sock"
    monkeypatch.delenv("DOCKER_HOST")
    assert dockerhttp.socket_path() == dockerhttp.DEFAULT_SOCKET
