"""Hostile-archive filtering: turn a submitted tarball into a tar that is safe to extract in cwd.

Submissions are untrusted. `filter_submission` reads the archive once, as a stream, and writes a
new plain tar holding only members that are safe and selected by `[submission] paths/exclude`,
with names relative to cwd. The judge extracts that tar, never the original, so nothing a
submission packs (absolute paths, `..`, links that leave cwd, devices, hardlinks, setuid bits,
xattrs, owners) reaches the Docker daemon.

Decisions (see the issue; each one is a trade-off written down):

* Every dropped member is listed in `rejected` with a reason, the hostile ones ("absolute path",
  "'..' in path", …) and the ones left out by the task's rules ("not in [submission] paths",
  "excluded by 'build'"), so the user sees why a file was missing. To keep result files small,
  members under a directory already listed for a rules reason are not listed again, and the list
  stops after MAX_LISTED_REJECTED entries with one "… N more" entry. Directories that are
  ancestors of a `paths` entry (`src` for `paths = ["src/main.c"]`) are skipped silently: Docker
  creates missing parents anyway.
* Over the member-count or size cap the whole archive is refused: `FilteredArchive.refused` holds
  the reason ("archive exceeds N members" / "archive exceeds N bytes uncompressed") and the caller
  writes an INVALID result. It is a verdict about the submission, not an infrastructure error, so
  it is not an exception. Sizes are counted from headers before any data is read, and the
  decompressed stream itself is capped too, so a gzip bomb costs at most the cap.
* A file that is not a tar archive (or is corrupt) raises ArchiveError naming the file. A
  zero-byte file is not a tar archive; an archive with zero members is fine.
* Exclude patterns: a pattern without glob characters (`*?[`) is a path prefix matched
  component-wise (`build`, `build/` and `./build` all drop `build` and everything under it, but
  not `builder` or `src/build`). A glob without `/` (`*.o`, `__pycache__*`) matches any path
  component, so a matching directory drops its contents too. A glob with `/` (`src/*.tmp`)
  matches the whole path, or any ancestor of it, with fnmatch.
* Symlinks are kept only when their target, resolved relative to the link's directory and through
  the other symlinks of the archive, stays inside cwd AND inside the submitted paths (stricter
  than "inside cwd": a link `solution.txt -> tests/expected.txt` would let a submission read the
  grader's hidden files as its answer). Symlinks are written last, so no member is ever extracted
  through one, and any member whose path passes through a symlink member (kept or rejected) is
  rejected. Link loops are rejected.
* A later member with the same path replaces an earlier one (tar semantics). A member under a
  regular file (`f` then `f/x`), or a file or symlink replacing a directory that already holds
  accepted members, is rejected: Docker would fail or silently drop files.
* Hardlinks become regular-file copies of a member accepted earlier in the same archive (their
  size counts toward the cap); any other hardlink is rejected.
* Output: regular files keep their permission bits (mode & 0o777: no setuid/setgid/sticky),
  directories too; owner is 0:0; mtimes are kept (build tools care); xattrs and pax records are
  dropped. The tar is GNU format (long names), names encoded as given (surrogateescape).
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import lzma
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

from .errors import InfrastructureError, SforgeError
from .model import SubmissionRules
from .results import Rejected

DEFAULT_MAX_MEMBERS = 10_000
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB uncompressed
MAX_LISTED_REJECTED = 1000
# The filtered tar stays in memory up to this size, then spills to a temporary file.
SPOOL_IN_MEMORY = 32 << 20
# Decompressed bytes allowed per member on top of file data (headers, long names, pax records).
_HEADER_ALLOWANCE = 8 << 10
_GLOB_CHARS = frozenset("*?[")


class ArchiveError(SforgeError):
    """The submission file is not a readable tar archive (not a verdict: nothing was graded)."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_members: int = DEFAULT_MAX_MEMBERS
    max_bytes: int = DEFAULT_MAX_BYTES  # total uncompressed bytes of file data


@dataclass
class FilteredArchive:
    """The safe tar to extract in cwd, and what was left out.

    `data` is a SpooledTemporaryFile positioned at 0 (in memory up to SPOOL_IN_MEMORY, then on
    disk), holding an uncompressed tar; `size` is its length. Close it (or use `with`) when done.
    When `refused` is set, the whole archive was refused and `data` is empty.
    """

    data: BinaryIO
    size: int
    members: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    refused: str | None = None

    def read_bytes(self) -> bytes:
        self.data.seek(0)
        try:
            return self.data.read()
        finally:
            self.data.seek(0)

    def close(self) -> None:
        self.data.close()

    def __enter__(self) -> FilteredArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TooLarge(Exception):
    pass


class _Corrupt(Exception):
    pass


class _CappedReader:
    """Reads the decompressed stream, failing past a byte cap and marking decoder errors."""

    def __init__(self, raw: IO[bytes], cap: int):
        self.raw = raw
        self.cap = cap
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        try:
            chunk = self.raw.read(n)
        except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError) as exc:
            raise _Corrupt(str(exc) or type(exc).__name__) from exc
        self.count += len(chunk)
        if self.count > self.cap:
            raise _TooLarge
        return chunk


class _Slice:
    """A read-only window on an earlier member's data inside the output spool (hardlink copies)."""

    def __init__(self, fh: BinaryIO, start: int, size: int):
        self.fh, self.pos, self.end = fh, start, start + size

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self.end - self.pos:
            n = self.end - self.pos
        back = self.fh.tell()
        self.fh.seek(self.pos)
        chunk = self.fh.read(n)
        self.fh.seek(back)
        self.pos += len(chunk)
        return chunk


def _decompressed(fh: BinaryIO) -> IO[bytes]:
    """Detect compression by content (gzip, bzip2, xz), not by file name."""
    magic = fh.read(6)
    fh.seek(0)
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    if magic[:3] == b"BZh":
        return bz2.BZ2File(fh, mode="rb")
    if magic == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(fh, mode="rb")
    return fh


def _normalize(name: str) -> tuple[str, str | None]:
    """Member name → (path relative to cwd, None) or ("", reason). "" with no reason is cwd."""
    if name.startswith("/"):
        return "", "absolute path"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "", "'..' in path"
    return "/".join(parts), None


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _under(path: str, prefix: str) -> bool:
    return prefix == "" or path == prefix or path.startswith(prefix + "/")


class _Selection:
    """`[submission] paths` and `exclude`, normalized once."""

    def __init__(self, rules: SubmissionRules):
        self.paths = [self._clean(p) for p in rules.paths]
        self.everything = "" in self.paths
        self.exclude = [(raw, self._clean(raw)) for raw in rules.exclude]

    @staticmethod
    def _clean(pattern: str) -> str:
        parts = [p for p in pattern.strip().split("/") if p not in ("", ".")]
        return "/".join(parts)

    def reason(self, path: str) -> str | None:
        """Why the task's rules leave `path` out, or None if it is selected."""
        if not self.everything and not any(_under(path, p) for p in self.paths):
            return "not in [submission] paths"
        for raw, pat in self.exclude:
            if not pat:
                continue
            if _GLOB_CHARS.isdisjoint(pat):
                hit = _under(path, pat)
            elif "/" in pat:
                hit = any(fnmatch.fnmatchcase(p, pat) for p in [*_ancestors(path), path])
            else:
                hit = any(fnmatch.fnmatchcase(c, pat) for c in path.split("/"))
            if hit:
                return f"excluded by {raw!r}"
        return None

    def is_parent(self, path: str) -> bool:
        """A directory on the way to a selected path (created by Docker anyway)."""
        return not self.everything and any(p.startswith(path + "/") for p in self.paths)


def _out_info(name: str, kind: bytes, mode: int, mtime: float, size: int = 0,
              linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode & 0o777
    info.mtime = max(0, int(mtime))
    info.size = size
    info.linkname = linkname
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


class _Filter:
    def __init__(self, rules: SubmissionRules, limits: ArchiveLimits, out: tarfile.TarFile,
                 spool: BinaryIO):
        self.sel = _Selection(rules)
        self.limits = limits
        self.out = out
        self.spool = spool
        self.count = 0
        self.total = 0
        self.members: dict[str, None] = {}  # accepted paths, each at its latest position
        self.kinds: dict[str, str] = {}  # accepted path -> "file" | "dir" | "link"
        self.files: dict[str, tuple[int, int, int, float]] = {}  # path -> data offset, size, …
        self.links: dict[str, tuple[str, float]] = {}  # pending symlinks: path -> target, mtime
        self.parents: set[str] = set()  # directories that hold accepted members
        self.symlinks: set[str] = set()  # every symlink member's path, rejected ones too
        self.resolved: dict[str, str | None] = {}  # symlink path -> where it leads (memo)
        self.rejected: list[Rejected] = []
        self.omitted = 0
        self.rule_dirs: set[str] = set()  # directories listed as left out by the rules

    # -- bookkeeping ---------------------------------------------------------------------------
    def reject(self, path: str, reason: str, by_rules: bool = False, is_dir: bool = False) -> None:
        if by_rules:
            if any(a in self.rule_dirs for a in _ancestors(path)):
                return  # its directory is listed already, with the same kind of reason
            if is_dir:
                self.rule_dirs.add(path)
        if len(self.rejected) < MAX_LISTED_REJECTED:
            self.rejected.append(Rejected(path=path, reason=reason))
        else:
            self.omitted += 1

    def accept(self, path: str, kind: str) -> None:
        self.members.pop(path, None)
        self.members[path] = None
        self.kinds[path] = kind
        self.parents.update(_ancestors(path))
        if kind != "file":
            self.files.pop(path, None)
        if kind != "link":
            self.links.pop(path, None)
            self.symlinks.discard(path)

    def grow(self, size: int) -> None:
        self.total += size
        if self.total > self.limits.max_bytes:
            raise _TooLarge

    # -- one member ------------------------------------------------------------------------------
    def add(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        self.count += 1
        if self.count > self.limits.max_members:
            raise _TooLarge
        if m.isreg() or m.type not in tarfile.SUPPORTED_TYPES:
            self.grow(m.size)  # from the header, before any data is read
        path, bad = _normalize(m.name)
        if bad:
            return self.reject(m.name, bad)
        if not path:
            return None  # "." / "./": cwd itself
        for a in _ancestors(path):
            if a in self.symlinks:
                return self.reject(path, f"passes through symlink {a!r}")
            if self.kinds.get(a) == "file":
                return self.reject(path, f"passes through file {a!r}")
        if m.issym():
            self.symlinks.add(path)
        if m.ischr() or m.isblk():
            return self.reject(path, "device file")
        if m.isfifo():
            return self.reject(path, "FIFO")
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            return self.reject(path, f"unsupported member type {m.type!r}")
        rule = self.sel.reason(path)
        if rule:
            if m.isdir() and self.sel.is_parent(path):
                return None
            return self.reject(path, rule, by_rules=True, is_dir=m.isdir())
        if m.isdir():
            self.out.addfile(_out_info(path, tarfile.DIRTYPE, m.mode, m.mtime))
            return self.accept(path, "dir")
        if (m.isreg() or m.islnk()) and path in self.parents:
            return self.reject(path, f"would replace directory {path!r} holding earlier members")
        if m.isreg():
            src = tar.extractfile(m)
            return self.write_file(path, m.mode, m.mtime, m.size, src)
        if m.islnk():
            target, bad = _normalize(m.linkname)
            if bad or target not in self.files:
                return self.reject(path, f"hardlink to {m.linkname!r}, which is not a regular file "
                                   "accepted earlier in the archive")
            start, size, mode, mtime = self.files[target]
            self.grow(size)
            return self.write_file(path, mode, mtime, size, _Slice(self.spool, start, size))
        # symlink: decided at the end, when every symlink of the archive is known
        if path in self.parents:
            return self.reject(path, f"symlink would replace directory {path!r} holding earlier "
                               "members")
        if m.linkname.startswith("/"):
            return self.reject(path, f"symlink to absolute path {m.linkname!r}")
        self.links[path] = (m.linkname, m.mtime)
        return self.accept(path, "link")

    def write_file(self, path: str, mode: int, mtime: float, size: int, src: object) -> None:
        self.out.addfile(_out_info(path, tarfile.REGTYPE, mode, mtime, size), src)
        start = self.spool.tell() - (-(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE)
        self.files[path] = (start, size, mode, mtime)
        self.accept(path, "file")

    # -- symlinks, last --------------------------------------------------------------------------
    def resolve(self, path: str) -> str | None:
        """Where the symlink at `path` leads (relative to cwd), or None if it leaves cwd or loops.

        Memoized, so a hostile web of links costs linear time; a link met again while it is
        being resolved is a loop.
        """
        if path in self.resolved:
            return self.resolved[path]
        self.resolved[path] = None
        result = self._walk(path.split("/")[:-1], self.links[path][0])
        self.resolved[path] = result
        return result

    def _walk(self, here: list[str], target: str) -> str | None:
        if target.startswith("/"):
            return None
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not here:
                    return None
                here.pop()
                continue
            here.append(part)
            joined = "/".join(here)
            if joined in self.links:
                resolved = self.resolve(joined)
                if resolved is None:
                    return None
                here = resolved.split("/") if resolved else []
        return "/".join(here)

    def finish_links(self) -> None:
        for path, (target, mtime) in list(self.links.items()):
            resolved = self.resolve(path)
            if resolved is None:
                reason = f"symlink to {target!r} leaves the working directory (or loops)"
            elif resolved and self.sel.reason(resolved):
                reason = (f"symlink to {target!r} points outside the [submission] paths "
                          f"({self.sel.reason(resolved)})")
            elif not resolved and not self.sel.everything:
                reason = f"symlink to {target!r} points outside the [submission] paths"
            else:
                self.out.addfile(_out_info(path, tarfile.SYMTYPE, 0o777, mtime, linkname=target))
                continue
            self.members.pop(path, None)
            self.reject(path, reason)


def _spool() -> BinaryIO:
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, prefix="sforge-sub-")  # type: ignore[return-value]


def filter_submission(archive: Path, rules: SubmissionRules,
                      limits: ArchiveLimits | None = None) -> FilteredArchive:
    """Read `archive` (tar, tar.gz, tar.bz2, tar.xz) once and keep what is safe and selected.

    Raises ArchiveError if it is not a readable tar archive; InfrastructureError if the
    filtered copy cannot be written (disk full). A cap overrun is not an exception: see
    `FilteredArchive.refused`.
    """
    limits = limits or ArchiveLimits()
    archive = Path(archive)
    try:
        src = archive.open("rb")
    except OSError as exc:
        raise ArchiveError(f"cannot read submission archive {archive}: {exc}") from None
    spool = _spool()
    out = tarfile.open(fileobj=spool, mode="w", format=tarfile.GNU_FORMAT,  # noqa: SIM115
                       encoding="utf-8", errors="surrogateescape")
    filt = _Filter(rules, limits, out, spool)
    cap = limits.max_bytes + (limits.max_members + 4) * _HEADER_ALLOWANCE
    try:
        with src:
            reader = _CappedReader(_decompressed(src), cap)
            with tarfile.open(fileobj=reader, mode="r|",  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape") as tar:
                for member in tar:
                    filt.add(tar, member)
        filt.finish_links()
        out.close()
    except _TooLarge:
        spool.close()
        reason = (f"archive exceeds {limits.max_members} members"
                  if filt.count > limits.max_members
                  else f"archive exceeds {limits.max_bytes} bytes uncompressed")
        return FilteredArchive(data=_spool(), size=0, refused=reason)
    except _Corrupt as exc:
        spool.close()
        raise ArchiveError(f"submission archive {archive} is corrupt: {exc}") from None
    except tarfile.TarError as exc:
        spool.close()
        raise ArchiveError(f"submission archive {archive} is not a readable tar archive "
                           f"(.tar or .tar.gz expected): {exc}") from None
    except OSError as exc:
        spool.close()
        raise InfrastructureError(f"cannot write the filtered copy of {archive}: {exc}") from None
    except BaseException:
        spool.close()
        raise
    size = spool.tell()
    spool.seek(0)
    rejected = filt.rejected
    if filt.omitted:
        rejected.append(Rejected(path="…", reason=f"{filt.omitted} more rejected members "
                                 "not listed"))
    return FilteredArchive(data=spool, size=size, members=list(filt.members), rejected=rejected)
