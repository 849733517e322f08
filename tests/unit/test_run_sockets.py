"""The service relay of a run's sockets under a hostile agent: however many connections
the agent opens on /run/sforge/service.sock, the judge service (shared by every run) sees
at most a handful of them; the run's own calls still get through once it lets go."""

from __future__ import annotations

import socket
import threading
import time

from sforge.runs.proxy import MAX_RELAYED, HostSockets
from tests.helpers.servers import RawServer


class _Upstream(RawServer):
    """Stands in for the judge service: counts the connections it holds, answers one line
    to each."""

    def __init__(self) -> None:
        self.open = 0
        self.peak = 0
        self.lock = threading.Lock()
        super().__init__(self._hold)

    def _hold(self, conn: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.peak = max(self.peak, self.open)
        try:
            if conn.recv(100):
                conn.sendall(b"ok\n")
            conn.recv(100)  # held until the client goes
        finally:
            with self.lock:
                self.open -= 1


def test_an_agent_cannot_flood_the_service_through_its_relay(tmp_path):
    upstream = _Upstream()
    host = HostSockets(tmp_path, upstream.url, None)
    host.start()
    flood: list[socket.socket] = []
    try:
        for _ in range(300):  # opened and left idle, as a slow-loris client does
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(tmp_path / "service.sock"))
            flood.append(s)
        time.sleep(1.0)
        assert upstream.peak <= MAX_RELAYED, upstream.peak
        flood[-1].settimeout(5)  # one over the cap is told to retry (sforge-submit does)
        assert flood[-1].recv(200).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        for s in flood:
            s.close()
        flood.clear()
        deadline = time.monotonic() + 10
        while upstream.open and time.monotonic() < deadline:
            time.sleep(0.05)
        # the run's own call gets through once the flood is gone
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(str(tmp_path / "service.sock"))
        s.sendall(b"hello\n")
        assert s.recv(10) == b"ok\n"
        s.close()
    finally:
        for s in flood:
            s.close()
        host.stop()
        upstream.stop()
