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
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sforge.core.fileio import atomic_write_bytes, loads_json

TAG_HEX = 12
_CHUNK = 1 << 20


def file_sha256(path: Path | str) -> str:
    """The sha256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class HashCache:
    """sha256 of files keyed by absolute path and stat identity; persisted as one JSON file."""

    VERSION = 3  # 3: archives in their own file (Pipeline.archive_hashes)
    RACY_NS = 2_000_000_000  # files modified this recently are hashed but not cached

    def __init__(self, path: Path | None = None, salt: str = ""):
        self.path = path
        self.salt = salt  # e.g. the sforge version: parsed values depend on the code
        self._entries: dict[str, list] = {}
        self._parsed: dict[str, list] = {}
        self._noted: dict[str, list] = {}  # this process's own writes, never persisted
        # Files hashed anew whose bytes differ from the digest cached under their name: a
        # file rewritten in place (`cp` over an archive), which its folder's stat misses.
        self.rewritten: set[str] = set()
        self._dirty = False
        if path is not None and path.is_file():
            try:
                data = loads_json(path.read_bytes())  # NaN or huge integers: json's reading
                if (isinstance(data, dict) and data.get("version") == self.VERSION
                        and isinstance(data.get("entries"), dict)):
                    self._entries = data["entries"]
                    if data.get("salt") == salt and isinstance(data.get("parsed"), dict):
                        self._parsed = data["parsed"]
            except (ValueError, OSError):  # orjson's JSONDecodeError is a ValueError
                self._entries, self._parsed = {}, {}  # a damaged cache only costs reads

    def _ident(self, st: os.stat_result) -> list[int]:
        return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]

    def _racy(self, st: os.stat_result) -> bool:
        return time.time_ns() - st.st_mtime_ns <= self.RACY_NS

    def sha256(self, path: Path | str, st: os.stat_result | None = None) -> str:
        """The file's sha256: the cached one while its stat identity holds, else read."""
        key = os.fspath(path)
        st = st or os.stat(key)
        ident = self._ident(st)
        hit = self._entries.get(key)
        if isinstance(hit, list) and len(hit) == 5 and hit[:4] == ident \
                and type(hit[4]) is str and len(hit[4]) == 64:  # else damaged: hashed again
            return hit[4]
        noted = self._noted.get(key)
        if noted is not None and noted[:4] == ident:
            return noted[4]
        digest = file_sha256(key)
        if isinstance(hit, list) and len(hit) == 5 and hit[4] != digest:
            self.rewritten.add(key)
        # "Racily clean": a file modified within the filesystem's timestamp granularity of
        # this read could change again with no visible stat change, so it is not cached.
        if not self._racy(st):
            self._entries[key] = [*ident, digest]
            self._dirty = True
        return digest

    def was_rewritten(self, path: Path | str) -> bool:
        """Whether this process found the file's bytes changed under an unchanged name."""
        return os.fspath(path) in self.rewritten

    def note(self, path: Path | str, digest: str) -> None:
        """The sha256 of a file this process has just written (hashing it as it went), so
        it is not read again to be hashed. Kept in memory only: a file this new is too
        recent to trust its stat on disk ("racily clean")."""
        key = os.fspath(path)
        self._noted[key] = [*self._ident(os.stat(key)), digest]

    def parsed(self, path: Path | str, parse: Callable[[Path], Any]) -> Any:
        """`parse(path)` (a JSON-able value, e.g. validated TOML), memoized by stat identity."""
        key = os.fspath(path)
        st = os.stat(key)
        ident = self._ident(st)
        hit = self._parsed.get(key)
        if isinstance(hit, list) and len(hit) == 5 and hit[:4] == ident:
            return hit[4]
        value = parse(Path(key))
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return value  # e.g. a TOML date in free-form metadata: not storable, not cached
        if not self._racy(st):
            self._parsed[key] = [*ident, value]
            self._dirty = True
        return value

    def save(self) -> None:
        """Write the cache atomically when anything was added (nothing without a path)."""
        if self.path is None or not self._dirty:
            return
        import orjson

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Entries (sizes, times, hex digests) through orjson, 100,000 of them in milliseconds;
        # parsed TOML through json, which keeps NaN and integers beyond 64 bits as they are.
        blob = b'{"version":%d,"salt":%s,"entries":%s,"parsed":%s}' % (
            self.VERSION, orjson.dumps(self.salt), orjson.dumps(self._entries),
            json.dumps(self._parsed).encode())
        atomic_write_bytes(self.path, blob)
        self._dirty = False


class FolderHashCache:
    """A HashCache per folder (one JSON file each under `root`), loaded when a file of that
    folder is first asked about: 100,000 submission archives in one file cost a third of a
    second to load, where `sforge report` after one change needs one task's folders."""

    def __init__(self, root: Path):
        self.root = root
        self._folders: dict[str, HashCache] = {}
        # Folders asked about since the last save: a listing saves after each of its 1,000
        # folders, so a save looks at these only, never at every folder loaded (quadratic).
        self._since_save: dict[str, HashCache] = {}

    def _for(self, path: str) -> HashCache:
        folder = os.path.dirname(path)
        cache = self._since_save.get(folder)
        if cache is None:
            cache = self._folders.get(folder)
            if cache is None:
                name = hashlib.sha256(folder.encode()).hexdigest()[:24]
                cache = self._folders[folder] = HashCache(self.root / f"{name}.json")
            self._since_save[folder] = cache
        return cache

    def sha256(self, path: Path | str, st: os.stat_result | None = None) -> str:
        """HashCache.sha256, through the cache of the file's folder."""
        return self._for(os.fspath(path)).sha256(path, st)

    def note(self, path: Path | str, digest: str) -> None:
        """HashCache.note, through the cache of the file's folder."""
        self._for(os.fspath(path)).note(path, digest)

    def was_rewritten(self, path: Path | str) -> bool:
        """HashCache.was_rewritten, through the cache of the file's folder."""
        return self._for(os.fspath(path)).was_rewritten(path)

    def save(self) -> None:
        """Save the folders' caches asked about since the last save."""
        for cache in list(self._since_save.values()):
            cache.save()
        self._since_save.clear()


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
        h.update(part.encode("utf-8", "surrogateescape"))  # file names need not be UTF-8
        h.update(b"\n")
    return h.hexdigest()[:TAG_HEX]
