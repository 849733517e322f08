"""Ctrl-C and SIGTERM for the runs of this process: the flags every run and its judge
service watch, and the handlers that set them."""

from __future__ import annotations

import signal
import threading

from sforge.core.errors import SforgeError


class Interrupted(SforgeError):
    """The run was stopped by Ctrl-C or SIGTERM; its attempt is recorded, its target is not.
    `attempt`: the attempt-<n>.json recorded, None when the run was stopped before it
    started (nothing recorded)."""

    def __init__(self, message: str, attempt: int | None = None):
        super().__init__(message)
        self.attempt = attempt


# Ctrl-C: the first asks every run of this process to stop and grade its workspace, the
# second abandons the grading (containers are still removed), a third is Python's default.
STOP = threading.Event()
ABORT = threading.Event()


def _on_signal(signum, frame) -> None:  # noqa: ARG001
    if not STOP.is_set():
        STOP.set()
        print("\nsforge: stopping runs: grading their final workspaces "
              "(Ctrl-C again to skip that)", flush=True)
    elif not ABORT.is_set():
        ABORT.set()
        print("\nsforge: abandoning final grading; removing containers", flush=True)
    else:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise KeyboardInterrupt


def install_signal_handlers() -> None:
    """From the main thread only (Python's rule): SIGINT and SIGTERM stop runs gracefully."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
