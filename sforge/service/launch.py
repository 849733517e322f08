"""Start and stop a judge service in a background process (what `sforge run` does when no
service is given, and what the tests do)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sforge.benchmark.loader import load_benchmark_name
from sforge.core.errors import SforgeError
from sforge.service.auth import admin_token as read_admin_token
from sforge.service.client import ServiceClient
from sforge.service.server import PARENT_ENV, already_running, read_address, service_running


@dataclass
class ServiceHandle:
    """A service started in the background: where it listens, its token, process and log."""
    url: str | None          # http://127.0.0.1:PORT, or None when only a socket
    socket: Path | None
    admin_token: str
    process: subprocess.Popen
    directory: Path          # <results>/<bench>/service
    log: Path
    urls: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The URL a client should use: the socket's when there is one."""
        return f"unix://{self.socket}" if self.socket else str(self.url)

    def client(self, token: str | None = None):
        """A client of this service with `token`, else the admin token."""
        return ServiceClient(self.address, token or self.admin_token)

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM (the service drains), then SIGKILL after `timeout`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL, no drain (what a crash looks like)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_service(benchmark: str | Path, results: str | Path, *,
                  host: str = "127.0.0.1", port: int | None = 0,
                  socket: str | Path | None = None, max_concurrent: float | None = None,
                  max_pending: int | None = None, config: str | Path | None = None,
                  admin_token: str | None = None, env: dict[str, str] | None = None,
                  log: str | Path | None = None, timeout: float = 60.0,
                  bound_to_parent: bool = False) -> ServiceHandle:
    """`sforge serve` in a child process; returns once it answers /health.

    port=0 picks a free port (the URL is read back from the service); port=None with a
    socket listens on the socket only. `admin_token` is passed as SFORGE_ADMIN_TOKEN;
    else the service's token file is read. `bound_to_parent`: the service drains and exits
    when this process dies, even by kill -9 (what `sforge run` wants of the service it
    starts for itself; a shared service outlives its starter).
    """
    bench = Path(benchmark).resolve()
    results = Path(results).resolve()
    directory = results / load_benchmark_name(bench) / "service"
    directory.mkdir(parents=True, exist_ok=True)
    log_path = Path(log) if log else directory / "serve.log"
    cmd = [sys.executable, "-m", "sforge", "-b", str(bench), "--results", str(results)]
    if config:
        cmd += ["--config", str(config)]
    cmd += ["serve"]
    if port is not None:  # no --host either: with a socket, `sforge serve` then listens only there
        cmd += ["--host", host, "--port", str(port)]
    if socket:
        cmd += ["--socket", str(Path(socket).resolve())]
    if max_concurrent is not None:
        cmd += ["--max-concurrent", str(max_concurrent)]
    if max_pending is not None:
        cmd += ["--max-pending", str(max_pending)]
    child_env = {**os.environ, **(env or {})}
    if admin_token:
        child_env["SFORGE_ADMIN_TOKEN"] = admin_token
    child_env.pop(PARENT_ENV, None)
    if bound_to_parent:
        child_env[PARENT_ENV] = str(os.getpid())
    if service_running(directory):  # its address file stays: it is in use
        raise already_running(directory)
    (directory / "address.json").unlink(missing_ok=True)
    with open(log_path, "ab") as out:
        start = out.tell()  # what this start writes: an old session's lines are not its error
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SforgeError(f"sforge serve exited ({proc.returncode}): "
                              f"{_tail(log_path, start)}")
        addr = read_address(directory)
        if addr and addr.get("pid") == proc.pid:
            token = admin_token or child_env.get("SFORGE_ADMIN_TOKEN") or \
                read_admin_token(directory / "admin.token", env={})
            return ServiceHandle(url=addr.get("url"),
                                 socket=Path(addr["socket"]) if addr.get("socket") else None,
                                 admin_token=token, process=proc, directory=directory,
                                 log=log_path, urls=addr.get("urls", []))
        time.sleep(0.05)
    proc.kill()
    raise SforgeError(f"sforge serve did not start within {timeout:g} s: "
                      f"{_tail(log_path, start)}")


def _tail(path: Path, start: int = 0, lines: int = 15) -> str:
    """The last `lines` lines written to the log from byte `start` on."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(nothing in its log)"
