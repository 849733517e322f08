"""The judge service a run job talks to: the one given (`--service URL`, shared by many runs
and by cluster jobs), or one started for the job and stopped after it (plain Snakemake)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sforge.runs.signals import ABORT
from sforge.service.auth import admin_token
from sforge.service.launch import start_service


@dataclass
class ServiceRef:
    """The judge service a run job uses: its URL and admin token."""
    url: str          # unix:///path or http://host:port
    admin_token: str


def admin_token_for(pipe) -> str:
    """SFORGE_ADMIN_TOKEN, else the service's token file under results/<bench>/service/."""
    return admin_token(pipe.layout.service / "admin.token", env=dict(os.environ))


@contextlib.contextmanager
def run_service(pipe, url: str | None) -> Iterator[ServiceRef]:
    """The service at `url` if given, else one started now and stopped on leaving."""
    if url:
        yield ServiceRef(url, admin_token_for(pipe))
        return
    with started_service(pipe) as ref:
        yield ref


@contextlib.contextmanager
def started_service(pipe, port: int | None = None) -> Iterator[ServiceRef]:
    """A service of this benchmark and results directory on a Unix socket (and a loopback
    port when asked, for cluster jobs), stopped (drained) on exit."""
    folder = Path(tempfile.mkdtemp(prefix="sforge-svc-"))
    handle = start_service(pipe.bench.root, pipe.layout.root.parent, port=port,
                           socket=folder / "service.sock", bound_to_parent=True)
    try:
        yield ServiceRef(handle.address if port is None else str(handle.url),
                         handle.admin_token)
    finally:
        handle.stop(timeout=5 if ABORT.is_set() else 90)  # a second Ctrl-C: no long drain
        shutil.rmtree(folder, ignore_errors=True)
