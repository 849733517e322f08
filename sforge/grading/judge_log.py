"""The judge's output as its log file: the first and last bytes kept, a line saying how much
was cut between, sforge's own lines at the end; the file appears whole or not at all."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from sforge.core.fileio import HeadTail

LOG_HEAD_BYTES = 8 << 20
LOG_TAIL_BYTES = 8 << 20


class LogWriter:
    """The judge's stdout+stderr to `path`: the first LOG_HEAD_BYTES straight to a temporary
    file, the last LOG_TAIL_BYTES in memory, a "… N bytes cut …" line between; the file
    appears (atomically) only at `finish`."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        self.fh = self.tmp.open("wb")
        self.out = HeadTail(self.fh, LOG_HEAD_BYTES, LOG_TAIL_BYTES)

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of output."""
        self.out.write(chunk)

    def finish(self, trailer: str) -> None:
        """End with `trailer` and put the log in place."""
        try:
            self.out.end()
            self.fh.write(trailer.encode())
            self.fh.close()
            os.replace(self.tmp, self.path)
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop the unfinished log."""
        if not self.fh.closed:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)


def write_log(path: Path, chunks: Iterable[bytes], trailer: str) -> None:
    """The judge's output (head and tail kept), then sforge's own trailer lines."""
    writer = LogWriter(path)
    try:
        for chunk in chunks:
            writer.feed(chunk)
        writer.finish(trailer)
    except BaseException:
        writer.discard()
        raise
