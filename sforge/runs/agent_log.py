"""An attempt's agent log and number: agent.log capped on the host, kept under a second name
per attempt, and the next attempt's number."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from sforge.benchmark.layout import attempt_files
from sforge.core.fileio import HeadTail

# agent.log is on the host: what an agent prints past its head is kept only as a tail
AGENT_LOG_HEAD = 16 << 20
AGENT_LOG_TAIL = 16 << 20


class CappedLog(HeadTail):
    """The agent's output to agent.log as it comes (people follow it), up to AGENT_LOG_HEAD
    bytes; past that only the last AGENT_LOG_TAIL bytes, written at close: an agent printing
    without end cannot fill the host's disk."""

    def __init__(self, fh: BinaryIO):
        super().__init__(fh, AGENT_LOG_HEAD, AGENT_LOG_TAIL)

    def flush(self) -> None:
        """Flush what is written so far, so people following agent.log see it."""
        self.fh.flush()

    def close(self) -> None:
        """Write the kept tail, if any, and flush; the file stays open for its owner."""
        self.end()
        self.fh.flush()



def next_attempt(folder: Path) -> int:
    """One past every attempt the folder knows of: its records and its kept logs (an
    attempt killed with -9 left a log and no record)."""
    return 1 + max([0, *(n for kind in ("record", "log") for n, _ in attempt_files(folder, kind))])


def keep_log(log_path: Path, kept: Path) -> bool:
    """Give agent.log a second name, `kept`, before the agent writes to it: Snakemake
    removes agent.log (the rule's log) when the next attempt starts, the second name keeps
    this attempt's output. False where the file system has no hard links."""
    log_path.touch()
    try:
        os.link(log_path, kept)
    except OSError:
        return False
    return True
