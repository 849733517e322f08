"""`sforge serve`: uvicorn on loopback TCP and/or a Unix socket, one service per results
directory (a lock file), SIGTERM drains.

Why FastAPI on uvicorn: an ASGI stack lets thousands of result waits (long polls) sit on
one event loop without a thread each; FastAPI gives request validation and the OpenAPI
docs (/docs) from the same declarations; uvicorn handles SIGTERM as a graceful shutdown
(stop accepting, finish requests, then our lifespan hook drains the judges).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from sforge.core.console import no_color
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_json
from sforge.plan.pipeline import Pipeline

DEFAULT_PORT = 8765
# Set by `start_service(bound_to_parent=True)`: the pid whose death ends this service.
PARENT_ENV = "SFORGE_SERVE_PARENT"
log = logging.getLogger("sforge.service")


@dataclass
class Listen:
    """Where the service listens: a TCP host and port, a Unix socket, or both."""
    host: str | None = "127.0.0.1"
    port: int | None = DEFAULT_PORT
    socket: Path | None = None


def _tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only for
    # sockets that say so, and without it every response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SforgeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def _unix(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # a socket left by a service that died
        else:
            raise SforgeError(f"{path}: another service is listening on this socket")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise SforgeError(f"cannot listen on {path}: {exc.strerror}") from None
    # Work containers may run as any user; the tokens, not file modes, guard the service.
    os.chmod(path, 0o666)
    sock.listen(1024)
    return sock


def already_running(directory: Path, holder: str = "") -> SforgeError:
    """The error for a second service on one results directory: the running one's pid and
    address, and how a run uses it instead."""
    addr = read_address(directory) or {}
    url = addr.get("url") or (f"unix://{addr['socket']}" if addr.get("socket") else None)
    return SforgeError(f"another sforge serve is running on {directory} "
                       f"({holder or 'pid ' + str(addr.get('pid', 'unknown'))}"
                       + (f", at {url}): use it with `sforge run --service {url}`, "
                          "or stop it" if url else "): stop it first"))


def service_running(directory: Path) -> bool:
    """Whether a service holds `directory`'s lock now (it is released when it exits, even
    by kill -9)."""
    try:
        with open(directory / "service.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _lock(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    fh = open(directory / "service.lock", "a+")  # noqa: SIM115 - held for the process life
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        raise already_running(directory, fh.read().strip()) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()}\n")
    fh.flush()
    return fh


def serve(pipe: Pipeline, listen: Listen, *, max_concurrent: float | None = None,
          max_pending: int | None = None, log_level: str = "info") -> int:
    """Run the service until a signal, one per service directory; → the exit status."""
    # start-up: FastAPI and uvicorn load only when the service starts
    import asyncio

    import uvicorn

    from sforge.service.app import create_app
    from sforge.service.core import Service, service_dir

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s sforge serve: %(message)s")
    directory = service_dir(pipe)
    lock = _lock(directory)
    sockets, urls = [], []
    own_socket = False
    try:
        if listen.port is not None:
            sock = _tcp(listen.host or "127.0.0.1", listen.port)
            host, port = sock.getsockname()[:2]
            sockets.append(sock)
            urls.append(f"http://{host if ':' not in host else f'[{host}]'}:{port}")
        if listen.socket is not None:
            sockets.append(_unix(listen.socket))
            own_socket = True
            urls.append(f"unix://{listen.socket}")
        if not sockets:
            raise SforgeError("nothing to listen on: give --port and/or --socket")
        service = Service(pipe, max_concurrent=max_concurrent, max_pending=max_pending)
        app = create_app(service)
        config = uvicorn.Config(app, log_level=log_level, access_log=False,
                                use_colors=False if no_color() else None,
                                timeout_graceful_shutdown=5, lifespan="on")
        server = uvicorn.Server(config)
        address = {"pid": os.getpid(), "urls": urls,
                   "url": next((u for u in urls if u.startswith("http")), None),
                   "socket": str(listen.socket) if listen.socket else None,
                   "admin_token_file": None if os.environ.get("SFORGE_ADMIN_TOKEN")
                   else str(directory / "admin.token")}

        async def watch_parent(pid: int) -> None:
            """Drain and exit once the process that started us is gone (kill -9 included:
            we are then re-parented), so a run's own service is never orphaned."""
            while not server.should_exit:
                if os.getppid() != pid:
                    log.warning("parent process %d is gone: draining", pid)
                    server.should_exit = True
                    return
                await asyncio.sleep(1.0)

        async def main() -> None:
            task = asyncio.create_task(server.serve(sockets=sockets))
            parent = os.environ.get(PARENT_ENV, "")
            watcher = asyncio.create_task(watch_parent(int(parent))) \
                if parent.isdigit() else None
            while not server.started and not task.done():
                await asyncio.sleep(0.02)
            if server.started:
                atomic_write_json(directory / "address.json", address)
                print(f"sforge serve: benchmark {pipe.bench.name}, listening on "
                      f"{', '.join(urls)}; capacity {service.capacity:g} judge CPU(s), "
                      f"{service.limits.max_pending} pending; admin token: "
                      f"{address['admin_token_file'] or '$SFORGE_ADMIN_TOKEN'}",
                      file=sys.stderr, flush=True)
            await task
            if watcher is not None:
                watcher.cancel()

        # uvicorn re-raises the signal it caught once it has shut down; with this handler
        # that ends here, and the finally below still cleans up.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
        asyncio.run(main())
        return 0 if server.started else 1
    finally:
        for sock in sockets:
            sock.close()
        if own_socket and listen.socket is not None:
            Path(listen.socket).unlink(missing_ok=True)
        (directory / "address.json").unlink(missing_ok=True)
        lock.close()


def read_address(directory: Path) -> dict | None:
    """The running service's address.json (pid, urls, token file), or None if unreadable."""
    try:
        return json.loads((directory / "address.json").read_text())
    except (OSError, ValueError):
        return None
