"""Loopback servers for tests: a raw TCP server for upstreams that misbehave below HTTP, and
a free port."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class RawServer:
    """A raw TCP server on loopback: `handle(conn)` runs in a thread per connection, which
    is closed after it. For upstreams that misbehave below HTTP."""

    def __init__(self, handle: Callable[[socket.socket], object]) -> None:
        self.handle = handle
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            self.handle(conn)

    def stop(self) -> None:
        """Wakes the accept first: a plain close() leaves a thread blocked in accept()
        holding the socket, which then listens on (and answers on) its port for the rest
        of the test session."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self.sock.close()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
