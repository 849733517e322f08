"""Atomic writes: nothing half-written is ever taken for a result.

Files are created with mode 0666 less the umask, as `open()` would: tables, reports and
results on a shared server or behind a web server must be readable by whoever the umask
lets read them. (`tempfile.mkstemp` would make every product 0600 whatever the umask.)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from sforge.core.errors import NotUtf8


def create_temp(directory: Path, prefix: str, suffix: str = ".tmp") -> tuple[int, Path]:
    """A new file in `directory` (same filesystem as the target, so a rename is atomic),
    opened for writing. O_EXCL makes the name ours; the kernel applies the umask to 0666."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        path = Path(directory) / f"{prefix}{os.urandom(6).hex()}{suffix}"
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file in {directory}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


SURROGATES = "\ud800-\udfff"  # as a regular expression's character range


def utf8(text: str) -> bytes:
    """`text` as UTF-8. A lone surrogate (a result another tool wrote with a "\\ud800"
    escape, which JSON allows; a file name that is not UTF-8) becomes U+FFFD, as sforge's
    own results have it, rather than stop a table or a page from being written."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        import re

        return re.sub(f"[{SURROGATES}]", "\ufffd", text).encode()


def atomic_write_text(path: Path, text: str) -> None:
    """atomic_write_bytes of `text` as UTF-8 (a lone surrogate becomes U+FFFD)."""
    atomic_write_bytes(path, utf8(text))


def atomic_write_json(path: Path, data: Any) -> None:
    """atomic_write_text of `data` as indented JSON with sorted keys."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


READ_FLAGS = (os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_NOCTTY", 0))


def open_regular(path: Path | str, follow: bool = True) -> tuple[int, os.stat_result]:
    """A descriptor and the stat of the regular file at `path` (a link followed unless
    `follow` is false); anything else is an OSError saying so. Opened without blocking, so
    a FIFO put where a result or a sidecar belongs cannot hang a report, nor a link to
    /dev/zero fill its memory."""
    fd = os.open(path, READ_FLAGS if follow else READ_FLAGS | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path: Path | str) -> bytes:
    """A small regular file's bytes through os.open/read: a third of open()'s cost, which
    counts when a report reads 100,000 files."""
    fd, _ = open_regular(path)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_utf8(path: Path | str) -> str:
    """A text file that must be UTF-8 (task.toml, benchmark.toml, a config file): its text,
    or NotUtf8 naming the file, offset and line of the first bad byte."""
    data = Path(path).read_bytes()
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise NotUtf8(path, data, exc) from None


def copy_range(src: int, dst: int, offset: int, size: int) -> None:
    """`size` bytes of `src` from `offset` appended to `dst` (at its file position), by the
    kernel where it can (copy_file_range), else read and written; a file shorter than that
    is an OSError (it changed under us)."""
    left = size
    try:
        while left:
            done = os.copy_file_range(src, dst, left, offset + size - left)
            if not done:
                raise OSError(f"copy_file_range: input ends {left} bytes early")
            left -= done
        return
    except (AttributeError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is None:
            raise  # the short input above, not a filesystem that cannot
    while left:
        chunk = os.pread(src, min(left, 1 << 20), offset + size - left)
        if not chunk:
            raise OSError(f"input ends {left} bytes early")
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        left -= len(chunk)


def loads_json(blob: bytes | str, bulk: bool = False) -> Any:
    """orjson (3× faster than json on our files) for a large document or one of many read
    in `bulk`; json for a one-off small one (importing orjson costs more than reading it:
    an eval's path) and for what orjson refuses that Python's json accepts (NaN and
    Infinity literals). The one difference between the two: orjson reads an integer
    beyond 64 bits as a float."""
    if bulk or len(blob) >= _ORJSON_FROM:
        import orjson

        try:
            return orjson.loads(blob)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(blob)
    except RecursionError:  # nested deeper than Python's json goes: not ours to read
        raise ValueError("JSON nested too deeply") from None


_ORJSON_FROM = 64 << 10  # bytes


@contextlib.contextmanager
def exclusive(path: Path, busy: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive flock on `path` (made when missing) for the block; `busy()` is called
    once if another holder makes this one wait. The kernel lets go of it when its holder
    dies, kill -9 included. Not re-entrant: a second hold in one process waits for ever.
    Where no lock can be had (a read-only tree, which has nothing to write either; a
    filesystem without locks, e.g. NFSv3 without lockd) the block runs unlocked, with a
    warning."""
    import fcntl
    import logging

    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags | os.O_CREAT, 0o666)
        except OSError:
            fd = os.open(path, flags)
    except OSError as exc:
        logging.getLogger("sforge").warning("sforge: warning: cannot open the lock %s (%s); "
                                            "going on without it", path, exc.strerror)
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if busy is not None:
                busy()
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:  # ENOLCK, EOPNOTSUPP: no locks on this filesystem
            logging.getLogger("sforge").warning("sforge: warning: cannot lock %s (%s); "
                                                "going on without it", path, exc.strerror)
        yield
    finally:
        os.close(fd)


def read_json(path: Path) -> Any:
    """A regular file's JSON (a FIFO or a device there is an OSError, not a hang)."""
    return json.loads(read_bytes(path))


def user_cache(name: str) -> Path:
    """A file of sforge's own in the user's cache directory (XDG_CACHE_HOME, else ~/.cache):
    memories that only ever save time (checks that passed, daemons' answers)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sforge" / name


def read_strings(path: Path) -> list[str]:
    """The JSON list of strings at `path`; [] when it is missing or not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [d for d in data if isinstance(d, str)] if isinstance(data, list) else []


def remember_string(path: Path, item: str, keep: int) -> None:
    """Add `item` (as the newest) to the list at `path`, keeping the `keep` newest; an
    unwritable place is ignored (the memory is only ever a shortcut)."""
    known = [k for k in read_strings(path) if k != item]
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps([*known, item][-keep:]))


class HeadTail:
    """Output that may not end (a judge's or an agent's) into `fh`: the first `head` bytes as
    they come, then only the last `tail` bytes, kept in memory and written by `end()` after a
    "… N bytes cut …" line. Whatever is printed, the file stays under head + tail + a line."""

    def __init__(self, fh: IO[bytes], head: int, tail: int):
        self.fh, self.room, self.keep = fh, head, tail
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.cut = 0

    def write(self, chunk: bytes) -> None:
        """Keep `chunk`: into the head while it has room, else into the bounded tail."""
        if self.room > 0:
            self.fh.write(chunk[:self.room])
            taken = min(self.room, len(chunk))
            self.room -= taken
            chunk = chunk[taken:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= self.keep:
            self.cut += len(self.tail[0])
            self.tail_size -= len(self.tail.popleft())

    def end(self) -> None:
        """Write the kept tail (after the cut line, if anything was cut); the file stays open."""
        tail = b"".join(self.tail)
        extra = len(tail) - self.keep
        if extra > 0:
            self.cut += extra
            tail = tail[extra:]
        if self.cut:
            self.fh.write(f"\n[sforge] … {self.cut} bytes cut …\n".encode())
        self.fh.write(tail)
        self.tail.clear()
        self.tail_size = 0
