"""Who a claim or a judge container belongs to, and whether that owner can still finish.

One identity for both (host, pid, process start time): a reused pid is not its owner, and an
owner on another host is judged only by its deadline, since its pid means nothing here.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from pathlib import Path


def process_start(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


@functools.cache
def hostname() -> str:
    return socket.gethostname()


def identity() -> dict[str, str]:
    """This process: host, pid and start time (no start time where /proc is missing)."""
    me = {"host": hostname(), "pid": str(os.getpid())}
    start = process_start(os.getpid())
    if start:
        me["start"] = start
    return me


def alive(pid: int, start: str | None) -> bool:
    """A process with this pid runs here, and it is the one that started at `start`."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    current = process_start(pid)
    return start is None or current is None or current == start


def gone(host: str | None, pid: str | int | None, start: str | None,
         deadline: float | None, now: float | None = None) -> str | None:
    """Why an owner can no longer finish ("dead", "deadline passed"), or None if it may.

    A deadline (epoch seconds) past is enough anywhere; a dead owner is only known on its
    own host.
    """
    now = time.time() if now is None else now
    if deadline is not None and now > deadline:
        return "deadline passed"
    if host == hostname():
        try:
            number = int(pid or "")
        except ValueError:
            return None
        if not alive(number, start):
            return "owner process dead"
    return None
