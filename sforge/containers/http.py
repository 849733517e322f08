"""The Docker Engine API over HTTP with the standard library: the transport of every container
and image-inspection call of sforge.containers.docker.DockerEngine.

Why not the Docker SDK here: importing it (requests, urllib3 and its own modules) costs more
than a whole judge container's start on a loaded machine, and `docker.from_env` adds two round
trips (/version, /_ping) before the first real call. One `sforge eval` makes ten calls; this
module makes them over a Unix socket (DOCKER_HOST unset or unix://) or TCP, with TLS when
DOCKER_TLS_VERIFY / DOCKER_CERT_PATH say so (Docker's own client variables). Builds, pushes and
pulls, which stream progress and are rare, stay on the SDK (the service's game channel too).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from collections.abc import Iterator
from typing import IO, Any
from urllib.parse import quote, urlencode, urlsplit

API_VERSION = "1.41"  # Docker 20.10; newer daemons answer it too
DEFAULT_SOCKET = "/var/run/docker.sock"


class HttpError(Exception):
    """The daemon answered with an error status; `message` is its JSON "message"."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Unreachable(Exception):
    """The daemon could not be reached (or the connection broke)."""


class CallTimeout(Exception):
    """No answer within the call's timeout."""


class Response:
    """A streamed answer: status, headers (lower-case names), and its body in chunks."""

    def __init__(self, status: int, headers: dict[str, str], body: Any, close: Any):
        self.status, self.headers = status, headers
        self._body, self._close = body, close

    def chunks(self, size: int = 1 << 16) -> Iterator[bytes]:
        """The body in chunks; CallTimeout or Unreachable when it stops coming."""
        try:
            while True:
                try:
                    chunk = self._body(size)
                except TimeoutError:  # e.g. /wait: headers at once, the body at exit
                    raise CallTimeout("no answer within the call's timeout") from None
                except (OSError, http.client.HTTPException) as exc:
                    raise Unreachable(str(exc)) from None
                if not chunk:
                    return
                yield chunk
        finally:
            self.close()

    def read(self) -> bytes:
        """The whole body."""
        return b"".join(self.chunks())

    def close(self) -> None:
        """Let the connection go."""
        self._close()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class HttpTransport:
    """One connection per call (cheap on a local socket; calls may come from threads)."""

    def __init__(self, base_url: str, tls: ssl.SSLContext | None = None):
        self.base_url = base_url
        parts = urlsplit(base_url)
        self.scheme = parts.scheme
        self.socket_path = parts.path if parts.scheme == "unix" else None
        # Docker's own defaults: 2376 with TLS, 2375 without
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (2376 if tls is not None else 2375)
        self.tls = tls

    @property
    def daemon(self) -> str:
        """Where the daemon is: a socket path or a URL."""
        return self.base_url

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        if self.tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self.tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                body: bytes | IO[bytes] | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = 600) -> Response:
        """Send one call; → the streamed answer (raises HttpError for a status ≥ 400)."""
        url = f"/v{API_VERSION}{path}"
        if params:
            url += "?" + urlencode({k: v for k, v in params.items() if v is not None})
        conn = self._connection(timeout)
        try:
            conn.request(method, url, body=body, headers=headers or {})
            resp = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise CallTimeout(f"{method} {path}: no answer within {timeout} s") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise Unreachable(f"cannot reach the Docker daemon at {self.daemon} "
                              f"({str(exc) or type(exc).__name__}); is dockerd running and "
                              "DOCKER_HOST right?") from None
        def close() -> None:
            resp.close()
            conn.close()

        answer = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                          resp.read1, close)
        if resp.status >= 400:
            raise HttpError(resp.status, _message(answer))
        return answer

    def json(self, method: str, path: str, params: dict[str, Any] | None = None,
             body: Any = None, timeout: float | None = 600) -> Any:
        """Send one call with a JSON body; → the JSON answer (None for an empty one)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if method == "POST" and data is None:
            headers["Content-Length"] = "0"
        raw = self.request(method, path, params, data, headers, timeout).read()
        return json.loads(raw) if raw.strip() else None


def _message(answer: Response) -> str:
    try:
        raw = answer.read()
    except Unreachable:
        return f"HTTP {answer.status}"
    try:
        return str(json.loads(raw).get("message") or raw.decode(errors="replace"))
    except (ValueError, AttributeError):
        return raw.decode(errors="replace").strip() or f"HTTP {answer.status}"


def quoted(value: str) -> str:
    """An id or image reference as one path segment."""
    return quote(value, safe="")


def from_env(env: dict[str, str] | os._Environ[str] | None = None) -> HttpTransport | None:
    """The transport Docker's own client would use (DOCKER_HOST, DOCKER_TLS_VERIFY,
    DOCKER_CERT_PATH), or None for hosts it does not speak (ssh://)."""
    env = os.environ if env is None else env
    host = env.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    scheme = urlsplit(host).scheme
    if scheme in ("unix", "http"):
        return HttpTransport(host if scheme == "unix" else "tcp" + host[4:])
    if scheme != "tcp":
        return None
    certs = env.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker")
    verify = bool(env.get("DOCKER_TLS_VERIFY"))
    if not verify and not env.get("DOCKER_CERT_PATH"):
        return HttpTransport(host)
    context = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem") if verify
                                         else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = os.path.join(certs, "cert.pem"), os.path.join(certs, "key.pem")
    if os.path.exists(cert):
        context.load_cert_chain(cert, key)
    return HttpTransport(host, context)


def from_client(client: Any) -> HttpTransport | None:
    """The transport of a docker SDK client made elsewhere (tests, callers holding one), when
    it talks over a Unix socket; None otherwise."""
    adapter = getattr(client.api, "_custom_adapter", None)
    socket_path = getattr(adapter, "socket_path", None)
    return HttpTransport(f"unix://{socket_path}") if socket_path else None
