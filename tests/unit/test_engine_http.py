"""The engine's standard-library transport: which daemon it talks to, and clear errors when
it cannot (its calls on a real daemon: tests/integration/test_engine_http_docker.py)."""

from __future__ import annotations

import pytest

from sforge.containers import http as engine_http


def test_transport_follows_docker_host(tmp_path) -> None:
    assert engine_http.from_env({}).socket_path == "/var/run/docker.sock"  # type: ignore[union-attr]
    unix = engine_http.from_env({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"})
    assert unix is not None and unix.socket_path == "/run/user/1000/docker.sock"
    tcp = engine_http.from_env({"DOCKER_HOST": "tcp://10.0.0.5:2376"})
    assert tcp is not None and (tcp.host, tcp.port, tcp.tls) == ("10.0.0.5", 2376, None)
    # DOCKER_TLS_VERIFY: the CA of DOCKER_CERT_PATH verifies the daemon (missing here: refused)
    with pytest.raises(OSError):
        engine_http.from_env({"DOCKER_HOST": "tcp://10.0.0.5:2376", "DOCKER_TLS_VERIFY": "1",
                              "DOCKER_CERT_PATH": str(tmp_path)})
    assert engine_http.from_env({"DOCKER_HOST": "ssh://me@host"}) is None


def test_default_ports_are_dockers() -> None:
    import ssl

    assert engine_http.HttpTransport("tcp://10.0.0.5").port == 2375
    tls = engine_http.HttpTransport("tcp://10.0.0.5", ssl.create_default_context())
    assert tls.port == 2376


def test_bad_tls_settings_are_a_clear_error(tmp_path, monkeypatch) -> None:
    from sforge.containers.docker import DockerEngine
    from sforge.core.errors import InfrastructureError

    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2376")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path))
    with pytest.raises(InfrastructureError, match="DOCKER_CERT_PATH"):
        DockerEngine().daemon  # noqa: B018
    monkeypatch.setenv("DOCKER_HOST", "ssh://me@host")
    with pytest.raises(InfrastructureError, match="ssh"):
        DockerEngine().daemon  # noqa: B018


def test_unreachable_daemon_is_named(tmp_path) -> None:
    transport = engine_http.HttpTransport(f"unix://{tmp_path}/no.sock")
    with pytest.raises(engine_http.Unreachable, match="no.sock.*DOCKER_HOST"):
        transport.json("GET", "/_ping")
