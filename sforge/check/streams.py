"""Reading an exported image's tar stream: a member's name as a path in the image, and a
search for a needle (the canary) in bytes read chunk by chunk."""

from __future__ import annotations

import posixpath
from typing import Protocol

CHUNK = 1 << 20  # bytes read at a time from a member or a git process


class ByteSink(Protocol):
    """Where a member's bytes are written as they are read, then closed."""

    def write(self, chunk: bytes) -> object:
        """Take one more chunk."""

    def close(self) -> None:
        """All the member's bytes came."""


def member_path(name: str) -> str:
    """A tar member's name (or hard-link target) as a path relative to the image's root:
    "./.git/HEAD" → ".git/HEAD", "/etc/x" → "etc/x", "./" → ""; leading dots of a name are
    kept, and no ".." climbs above the root (as when the archive is unpacked at /)."""
    return posixpath.normpath("/" + name).lstrip("/")


class Needle:
    """Whether `needle` occurs in a stream fed chunk by chunk, also across chunk boundaries
    (never when `needle` is empty or None)."""

    def __init__(self, needle: bytes | None):
        self.needle = needle or b""
        self.found = False
        self._tail = b""

    def feed(self, chunk: bytes) -> bool:
        """Search one more chunk; → whether the needle has been seen so far."""
        if self.needle and not self.found:
            joined = self._tail + chunk
            self.found = self.needle in joined
            keep = len(self.needle) - 1
            self._tail = joined[len(joined) - keep:] if keep else b""
        return self.found
