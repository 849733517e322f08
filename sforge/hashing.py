"""Content hashes of directory trees, the heart of the image tags.

A tree hash covers each entry's relative path, kind, exec bit and bytes (a symlink by its
target, an empty directory by its name) and never mtime, owner or the absolute path, so two
clones on two machines agree. A declared blob counts by its sha256, present or not.
File digests are cached by (size, mtime_ns, inode, ctime_ns): re-planning costs a stat per
file, not a read. The cache only ever saves reads; it never decides what is stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from .fileio import atomic_write_text

TAG_HEX = 12
_CHUNK = 1 << 20


def file_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class HashCache:
    """sha256 of files keyed by absolute path and stat identity; persisted as one JSON file."""

    VERSION = 1

    def __init__(self, path: Path | None = None):
        self.path = path
        self._entries: dict[str, list] = {}
        self._dirty = False
        if path is not None and path.is_file():
            try:
                data = json.loads(path.read_text())
                if data.get("version") == self.VERSION:
                    self._entries = data["entries"]
            except (ValueError, KeyError, OSError):
                self._entries = {}  # a damaged cache only costs reads

    def sha256(self, path: Path | str, st: os.stat_result | None = None) -> str:
        key = os.fspath(path)
        st = st or os.stat(key)
        ident = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        hit = self._entries.get(key)
        if hit is not None and hit[:4] == ident:
            return hit[4]
        digest = file_sha256(key)
        self._entries[key] = [*ident, digest]
        self._dirty = True
        return digest

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"version": self.VERSION,
                                                 "entries": self._entries}))
        self._dirty = False


def tree_entries(root: Path, prefix: str, blobs: Mapping[str, str], cache: HashCache) -> list[str]:
    """One line per entry of `root`, named `prefix/<relative path>`.

    `blobs` maps declared blob paths (relative, same prefix convention) to their sha256: they
    are counted by that sha whether the file is there or not, and their bytes are never read.
    """
    lines: list[str] = []
    blob_dirs = {str(Path(b).parent) for b in blobs}
    blob_dirs |= {str(p) for b in blobs for p in Path(b).parents}

    def walk(directory: str, rel: str) -> None:
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            return
        if not children and rel != prefix and rel not in blob_dirs:
            lines.append(f"D\0{rel}")
        for entry in children:
            child_rel = f"{rel}/{entry.name}"
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                lines.append(f"L\0{child_rel}\0{os.readlink(entry.path)}")
            elif stat.S_ISDIR(st.st_mode):
                walk(entry.path, child_rel)
            elif child_rel in blobs:
                continue  # counted below by its declared sha256
            elif stat.S_ISREG(st.st_mode):
                exe = "x" if st.st_mode & 0o111 else "-"
                lines.append(f"F\0{child_rel}\0{exe}\0{cache.sha256(entry.path, st)}")
            else:
                lines.append(f"O\0{child_rel}\0{stat.S_IFMT(st.st_mode)}")

    walk(os.fspath(root), prefix)
    lines.extend(f"B\0{path}\0{sha}" for path, sha in blobs.items())
    return sorted(lines)


def digest(parts: Iterable[str]) -> str:
    """The 12-hex tag of a list of entry lines and extra inputs (such as the base tag)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\n")
    return h.hexdigest()[:TAG_HEX]
