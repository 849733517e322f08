"""Reading a submitted tarball as one capped stream: compression told by content, a byte cap on
what it decompresses to, decoder errors marked; and the spool the filtered tar is written to."""

from __future__ import annotations

import bz2
import gzip
import lzma
import tempfile
import zlib
from typing import IO, BinaryIO

from sforge.grading.archive_limits import SPOOL_IN_MEMORY


class TooLarge(Exception):
    """The archive is over a cap: refused as a whole."""


class HeaderTooLarge(TooLarge):
    """A long-name or pax record longer than any name the platform can create."""

    def __init__(self, size: int, limit: int):
        super().__init__(size, limit)
        self.size, self.limit = size, limit


class Refused(Exception):
    """The archive breaks a rule that refuses it as a whole; the message is the reason."""


class Corrupt(Exception):
    """The compressed stream cannot be decoded."""


class CappedReader:
    """Reads the decompressed stream, failing past a byte cap and marking decoder errors."""

    def __init__(self, raw: IO[bytes], cap: int):
        self.raw = raw
        self.cap = cap
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        """Up to `n` decompressed bytes; TooLarge past the cap, Corrupt when decoding fails."""
        try:
            chunk = self.raw.read(n)
        except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError) as exc:
            raise Corrupt(str(exc) or type(exc).__name__) from exc
        self.count += len(chunk)
        if self.count > self.cap:
            raise TooLarge
        return chunk


class SpoolSlice:
    """A read-only window on an earlier member's data inside the output spool (hardlink copies)."""

    def __init__(self, fh: BinaryIO, start: int, size: int):
        self.fh, self.pos, self.end = fh, start, start + size

    def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes of the window, leaving the spool's own position where it was."""
        if n < 0 or n > self.end - self.pos:
            n = self.end - self.pos
        back = self.fh.tell()
        self.fh.seek(self.pos)
        chunk = self.fh.read(n)
        self.fh.seek(back)
        self.pos += len(chunk)
        return chunk


def decompressed(fh: BinaryIO) -> IO[bytes]:
    """Detect compression by content (gzip, bzip2, xz), not by file name."""
    magic = fh.read(6)
    fh.seek(0)
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    if magic[:3] == b"BZh":
        return bz2.BZ2File(fh, mode="rb")
    if magic == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(fh, mode="rb")
    return fh


def new_spool() -> BinaryIO:
    """An empty spool: in memory up to SPOOL_IN_MEMORY bytes, then a temporary file."""
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, prefix="sforge-sub-")  # type: ignore[return-value]
