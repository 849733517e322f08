"""Who a claim or a container belongs to, and whether that owner can still finish.

One identity for both (host, pid, process start time): a reused pid is not its owner, and an
owner on another host is judged only by its deadline, since its pid means nothing here.
Containers carry that identity as labels (with a deadline for judges), so
`sweep_stale_containers` removes, through the engine, those nobody waits for any more.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sforge.core.errors import InfrastructureError

if TYPE_CHECKING:
    from sforge.containers.engine import ContainerEngine


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
    """This host's name, asked once per process."""
    return socket.gethostname()


def node_name() -> str:
    """The machine a judge runs on, as people name it: SLURM's node name inside a job."""
    return os.environ.get("SLURMD_NODENAME") or hostname()


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


# -- containers: who owns one, and the sweep of those nobody waits for -------------------------
JUDGE_LABEL = "sforge.judge"
OWNER_PID_LABEL = "sforge.owner.pid"
OWNER_HOST_LABEL = "sforge.owner.host"
OWNER_START_LABEL = "sforge.owner.start"  # process start time: a reused pid is not its owner
DEADLINE_LABEL = "sforge.deadline"  # epoch seconds after which nobody waits for it any more


def labels(kind: str = JUDGE_LABEL, deadline: float | None = None) -> dict[str, str]:
    """Who owns a container (kind: JUDGE_LABEL, or a run's label), and when nobody waits for
    it any more (judges: wall clock + grace)."""
    me = identity()
    out = {kind: "1", OWNER_PID_LABEL: me["pid"], OWNER_HOST_LABEL: me["host"]}
    if deadline is not None:
        out[DEADLINE_LABEL] = str(int(deadline))
    if "start" in me:
        out[OWNER_START_LABEL] = me["start"]
    return out


def sweep_stale_containers(engine: ContainerEngine, kind: str = JUDGE_LABEL) -> list[str]:
    """Remove containers nobody waits for (judges, or work containers of runs with
    kind=RUN_LABEL); → removed ids.

    Stale: its owner died on this host (pid gone, or reused by another process), or its
    deadline label passed (on any host: the owner overran or hangs). A live owner's judge
    within its deadline, and another host's judge within its deadline, are never touched.
    """
    removed = []
    try:
        found = engine.containers(kind)
    except InfrastructureError as exc:
        raise InfrastructureError(f"cannot list judge containers on the Docker daemon at "
                                  f"{engine.daemon}: {exc}") from None
    for cid, marks in found:
        try:
            deadline: float | None = float(marks[DEADLINE_LABEL])
        except (KeyError, ValueError):
            deadline = None
        if gone(marks.get(OWNER_HOST_LABEL), marks.get(OWNER_PID_LABEL),
                marks.get(OWNER_START_LABEL), deadline) is None:
            continue
        try:
            if not engine.remove_container(cid):
                continue  # another sweeper was first
        except InfrastructureError as exc:
            raise InfrastructureError(f"cannot remove stale judge container {cid[:12]}: "
                                      f"{exc}") from None
        removed.append(cid)
    return removed


def remove_own(engine: ContainerEngine, kind: str = JUDGE_LABEL) -> list[str]:
    """Remove the containers of `kind` this process created (a stop before they finished).
    This process: host, pid and process start all match (a daemon shared by several hosts or
    pid namespaces sees the same pid number from other processes)."""
    me = labels(kind)
    wanted = [f"{name}={me[name]}" for name in (OWNER_HOST_LABEL, OWNER_PID_LABEL,
                                                OWNER_START_LABEL) if name in me]
    return [cid for cid, _ in engine.containers(kind, *wanted) if engine.remove_container(cid)]


# -- private host directories a judge writes into (its out directory) -------------------------
OUT_DIR_PREFIX = "sforge-out-"
_OUT_DIR_NAME = re.compile(re.escape(OUT_DIR_PREFIX) + r"h([0-9a-f]{8})-(\d+)-(\d+|x)-")


def host_tag(host: str | None = None) -> str:
    """The host in a directory name: a temp dir may be shared by hosts (cluster nodes on one
    filesystem), and a pid is only judged on its own host. 8 hex digits: any hostname fits."""
    return hashlib.blake2b((host or hostname()).encode(), digest_size=4).hexdigest()


def private_dir() -> Path:
    """A new 0700 directory in the temp dir, named by this process (host, pid and start), so
    that `sweep_stale_dirs` on this host can remove it once this process is gone, and no
    sweep removes it before."""
    me = identity()
    return Path(tempfile.mkdtemp(
        prefix=f"{OUT_DIR_PREFIX}h{host_tag(me['host'])}-{me['pid']}-{me.get('start', 'x')}-"))


def sweep_stale_dirs() -> list[str]:
    """Remove the private directories of sforge processes that died on this machine (killed
    while a judge ran); → the paths removed."""
    removed, here = [], host_tag()
    root = tempfile.gettempdir()
    try:
        names = [e.name for e in os.scandir(root) if e.name.startswith(OUT_DIR_PREFIX)]
    except OSError:
        return []
    for name in names:
        m = _OUT_DIR_NAME.match(name)
        if m is None or m.group(1) != here:
            continue  # another host's (or a name we cannot read): its owner is not ours to judge
        start = None if m.group(3) == "x" else m.group(3)
        if gone(hostname(), m.group(2), start, None) is None:
            continue
        path = os.path.join(root, name)
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed
