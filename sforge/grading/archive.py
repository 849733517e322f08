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
* Header bytes count toward `max_bytes` like file data: 512 per header plus every GNU long-name
  and pax extension record, checked from the header before tarfile reads the record, so a
  small archive declaring a 300 MB long name is refused at once. An extension record longer
  than any name the platform can create (MAX_EXTENSION_BYTES) refuses the archive too.
* Names the kernel cannot create (a component over NAME_MAX bytes, a path under cwd over
  PATH_MAX, a symlink target over PATH_MAX) are rejected members with that reason, so the
  Docker daemon never sees them. Listed paths are cut at MAX_LISTED_NAME characters.
* A file that is not a tar archive (or is corrupt) raises ArchiveError naming the file; the
  judge turns it into the submission's invalid result. A zero-byte file is not a tar
  archive; an archive with zero members is fine.
* Exclude patterns: a pattern without glob characters (`*?[`) is a path prefix matched
  component-wise (`build`, `build/` and `./build` all drop `build` and everything under it, but
  not `builder` or `src/build`). A glob without `/` (`*.o`, `__pycache__*`) matches any path
  component, so a matching directory drops its contents too. A glob with `/` (`src/*.tmp`)
  matches the whole path, or any ancestor of it, with fnmatch. The sforge-submit helper
  applies the same rule (helper/exclude.go); helper/testdata/exclude_rules.json tests both.
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
* Metadata is the answer of some tasks (a shared directory with group `research`, mode 2770 and
  a default ACL), so by default it is kept: every mode bit (setuid/setgid/sticky too: they grant
  nothing in a judge that runs under no-new-privileges), the numeric owner and group (names are
  dropped: the judge's /etc/passwd decides what a number means), POSIX ACLs and `user.*`
  xattrs. `[submission] keep_metadata` narrows that ("mode": setuid/setgid/sticky, "owner",
  "acl", "xattr"; `[]` strips to mode & 0o777, owner 0:0 and no xattrs). Never kept: other
  xattrs (`security.*` such as file capabilities, `trusted.*` such as overlayfs' own, other
  `system.*`) and every other pax record. ACLs come from the raw `system.posix_acl_*` xattrs
  (validated) or from GNU tar's `SCHILY.acl.*` text, whose named entries (`group:research`)
  cannot be resolved outside the judge and are dropped; the output carries each ACL both ways
  (Docker's extraction reads the xattr, GNU tar the text). Whatever is changed is listed per
  member in `changed`, so a stripped bit is never silent. xattr bytes count toward max_bytes.
* A wrongly rooted archive (everything under one top directory `app/`, as `docker cp ctr:/app -`
  makes) is detected: when nothing of it is selected but would be without that directory, or
  when the directory is named like cwd itself, `warnings` says so.
* Output: mtimes are kept (build tools care). The tar is PAX format (long names, xattrs),
  names encoded as given (surrogateescape).
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import lzma
import posixpath
import struct
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from sforge.benchmark.model import SubmissionRules
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.results import Changed, Rejected

DEFAULT_MAX_MEMBERS = 10_000
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB uncompressed
MAX_LISTED_REJECTED = 1000
MAX_LISTED_NAME = 1024  # characters of a rejected path kept in the listing
# Linux limits (<linux/limits.h>): the longest file name component and path it can create.
NAME_MAX = 255
PATH_MAX = 4096
# A GNU long-name/long-link record longer than PATH_MAX names nothing creatable; pax records
# may also carry xattrs and comments (dropped anyway), so they get more room. Past these the
# archive is refused before tarfile reads the record into memory.
MAX_EXTENSION_BYTES = {tarfile.GNUTYPE_LONGNAME: PATH_MAX + 512,
                       tarfile.GNUTYPE_LONGLINK: PATH_MAX + 512,
                       tarfile.XHDTYPE: 1 << 20, tarfile.XGLTYPE: 1 << 20,
                       tarfile.SOLARIS_XHDTYPE: 1 << 20}
# The filtered tar stays in memory up to this size, then spills to a temporary file.
SPOOL_IN_MEMORY = 32 << 20
# Decompressed bytes allowed per member on top of file data (headers, long names, pax records).
_HEADER_ALLOWANCE = 8 << 10
_GLOB_CHARS = frozenset("*?[")
MAX_XATTRS = 64  # per member; more is refused as a whole, like an oversized archive
_XATTR = "SCHILY.xattr."
_ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
_ACL_TEXT = {"SCHILY.acl.access": "system.posix_acl_access",
             "SCHILY.acl.default": "system.posix_acl_default"}
# Tags of the Linux posix_acl_xattr format (little-endian: u32 version 2, then u16 tag,
# u16 perm, u32 id per entry; id 0xffffffff for the entries that name no one).
_ACL_TAGS = {"user_obj": 0x01, "user": 0x02, "group_obj": 0x04, "group": 0x08, "mask": 0x10,
             "other": 0x20}
_ACL_UNDEFINED = 0xFFFFFFFF


class ArchiveError(SforgeError):
    """The submission file is not a readable tar archive (not a verdict: nothing was graded)."""


@dataclass(frozen=True)
class ArchiveLimits:
    """The caps on a submission: these defaults are the only ones; config.yaml's
    archive_limits overrides them (sforge.grading.contract.archive_limits)."""

    max_members: int = DEFAULT_MAX_MEMBERS
    max_bytes: int = DEFAULT_MAX_BYTES  # total uncompressed bytes: file data and headers


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
    changed: list[Changed] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

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


class _HeaderTooLarge(_TooLarge):
    def __init__(self, size: int, limit: int):
        super().__init__(size, limit)
        self.size, self.limit = size, limit


def _listed(path: str) -> str:
    """A rejected path as listed: long ones cut, so the listing stays small."""
    if len(path) <= MAX_LISTED_NAME:
        return path
    return f"{path[:MAX_LISTED_NAME]}… ({len(path) - MAX_LISTED_NAME} more characters)"


def _name_problem(path: str, cwd: str) -> str | None:
    """Why the kernel could not create `path` under `cwd`, or None."""
    raw = path.encode("utf-8", "surrogateescape")
    longest = max((len(c) for c in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        return (f"name component of {longest} bytes (the platform's limit is {NAME_MAX} "
                "bytes)")
    full = len(cwd.rstrip("/").encode("utf-8", "surrogateescape")) + 1 + len(raw)
    if full >= PATH_MAX:
        return f"path of {full} bytes under cwd (the platform's limit is {PATH_MAX - 1} bytes)"
    return None


class _Corrupt(Exception):
    pass


class _TooManyXattrs(Exception):
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
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
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


@dataclass(frozen=True)
class _Meta:
    """What a member carries besides its bytes, as it will be written."""
    mode: int
    mtime: float
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, str], ...] = ()


def _out_info(name: str, kind: bytes, meta: _Meta, size: int = 0,
              linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = meta.mode
    info.mtime = max(0, int(meta.mtime))
    info.size = size
    info.linkname = linkname
    info.uid, info.gid = meta.uid, meta.gid
    info.uname = info.gname = ""  # numeric: names mean what the judge's /etc/passwd says
    info.pax_headers = {_XATTR + k: v for k, v in meta.xattrs}
    for text_key, name in _ACL_TEXT.items():  # GNU tar restores ACLs from text, Docker from
        value = dict(meta.xattrs).get(name)   # the xattr: write both, as GNU tar does
        if value is not None:
            info.pax_headers[text_key] = acl_to_text(_raw(value))
    return info


def acl_to_text(value: bytes) -> str:
    """A valid binary POSIX ACL → GNU tar's text form with numeric ids."""
    names = {v: k for k, v in _ACL_TAGS.items()}
    lines = []
    for off in range(4, len(value), 8):
        tag, perm, who = struct.unpack_from("<HHI", value, off)
        kind = names[tag]
        qualifier = str(who) if kind in ("user", "group") else ""
        perms = "".join(c if perm & b else "-" for c, b in zip("rwx", (4, 2, 1), strict=True))
        lines.append(f"{kind.removesuffix('_obj')}:{qualifier}:{perms}")
    return "\n".join(lines) + "\n"


def _raw(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


def _acl_valid(value: bytes) -> bool:
    if len(value) < 4 or (len(value) - 4) % 8 or struct.unpack_from("<I", value)[0] != 2:
        return False
    tags = set(_ACL_TAGS.values())
    return all(struct.unpack_from("<HHI", value, off)[0] in tags and
               struct.unpack_from("<HHI", value, off)[1] <= 7
               for off in range(4, len(value), 8))


def acl_from_text(text: str) -> tuple[bytes, list[str]]:
    """GNU tar's SCHILY.acl text ("user::rwx\ngroup:1234:r-x\n…") → the binary xattr value,
    and the entries dropped because they name a user or group instead of a number."""
    entries, dropped = [], []
    for line in text.replace(",", "\n").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(":")
        if len(parts) < 3 or parts[0] not in ("user", "group", "mask", "other", "u", "g", "m",
                                              "o"):
            dropped.append(line)
            continue
        kind = {"u": "user", "g": "group", "m": "mask", "o": "other"}.get(parts[0], parts[0])
        who, perms = parts[1], parts[2]
        if len(perms) != 3 or any(c not in "rwx-" for c in perms):
            dropped.append(line)
            continue
        bits = sum(b for c, b in zip(perms, (4, 2, 1), strict=True) if c != "-")
        if who == "" or kind in ("mask", "other"):
            tag = _ACL_TAGS[{"user": "user_obj", "group": "group_obj"}.get(kind, kind)]
            entries.append((tag, bits, _ACL_UNDEFINED))
        elif who.isdigit() or (len(parts) > 3 and parts[3].isdigit()):
            uid = int(who) if who.isdigit() else int(parts[3])
            entries.append((_ACL_TAGS[kind], bits, uid))
        else:
            dropped.append(line)
    entries.sort(key=lambda e: (e[0], e[2]))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries), dropped


class _Filter:
    def __init__(self, rules: SubmissionRules, limits: ArchiveLimits, out: tarfile.TarFile,
                 spool: BinaryIO, cwd: str = "/"):
        self.sel = _Selection(rules)
        self.cwd = cwd
        self.limits = limits
        self.out = out
        self.spool = spool
        self.count = 0
        self.total = 0
        self.members: dict[str, None] = {}  # accepted paths, each at its latest position
        self.kinds: dict[str, str] = {}  # accepted path -> "file" | "dir" | "link"
        self.files: dict[str, tuple[int, int, _Meta]] = {}  # path -> data offset, size, meta
        self.links: dict[str, tuple[str, _Meta]] = {}  # pending symlinks: path -> target, meta
        self.parents: set[str] = set()  # directories that hold accepted members
        self.symlinks: set[str] = set()  # every symlink member's path, rejected ones too
        self.resolved: dict[str, str | None] = {}  # symlink path -> where it leads (memo)
        self.rejected: list[Rejected] = []
        self.omitted = 0
        self.rule_dirs: set[str] = set()  # directories listed as left out by the rules
        self.keep = set(rules.keep_metadata)
        self.changed: list[Changed] = []
        self.changed_omitted = 0
        self.tops: set[str] = set()  # first path component of every member
        self.unrooted_hits = 0  # members the rules left out that one level down would select

    # -- bookkeeping ---------------------------------------------------------------------------
    def reject(self, path: str, reason: str, by_rules: bool = False, is_dir: bool = False) -> None:
        if by_rules:
            if any(a in self.rule_dirs for a in _ancestors(path)):
                return  # its directory is listed already, with the same kind of reason
            if is_dir:
                self.rule_dirs.add(path)
        if len(self.rejected) < MAX_LISTED_REJECTED:
            self.rejected.append(Rejected(path=_listed(path), reason=reason))
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

    def change(self, path: str, what: str) -> None:
        if len(self.changed) < MAX_LISTED_REJECTED:
            self.changed.append(Changed(path=path, change=what))
        else:
            self.changed_omitted += 1

    def meta(self, path: str, m: tarfile.TarInfo, link: bool = False) -> _Meta:
        """The member's metadata as kept under the task's rules; every change is listed."""
        mode = 0o777 if link else m.mode & 0o7777
        if mode & 0o7000 and "mode" not in self.keep:
            self.change(path, f"mode {mode:04o} -> {mode & 0o777:04o} (task keeps no "
                        "setuid/setgid/sticky bits)")
            mode &= 0o777
        uid, gid = m.uid, m.gid
        if (uid or gid) and "owner" not in self.keep:
            self.change(path, f"owner {uid}:{gid} -> 0:0 (task keeps no owners)")
            uid = gid = 0
        xattrs: dict[str, str] = {}
        acl_text: dict[str, str] = {}
        for key, value in m.pax_headers.items():
            if key in _ACL_TEXT:
                acl_text[_ACL_TEXT[key]] = value
            elif key.startswith(_XATTR):
                xattrs[key[len(_XATTR):]] = value
        if len(xattrs) + len(acl_text) > MAX_XATTRS:
            raise _TooManyXattrs(path)
        self.grow(sum(len(_raw(k)) + len(_raw(v)) for k, v in [*xattrs.items(),
                                                                 *acl_text.items()]))
        kept: dict[str, str] = {}
        for name, value in xattrs.items():
            if name in _ACL_XATTRS:
                if "acl" not in self.keep:
                    self.change(path, f"ACL {name} dropped (task keeps no ACLs)")
                elif link:
                    self.change(path, f"ACL {name} dropped (symlinks have none)")
                elif not _acl_valid(_raw(value)):
                    self.change(path, f"ACL {name} dropped: not a valid POSIX ACL")
                else:
                    kept[name] = value
            elif name.startswith("user."):
                if "xattr" in self.keep and not link:
                    kept[name] = value
                else:
                    self.change(path, f"xattr {name} dropped (task keeps no xattrs)")
            else:
                self.change(path, f"xattr {name} dropped (only user.* xattrs and ACLs are "
                            "kept)")
        for name, text in acl_text.items():
            if name in kept or name in xattrs:
                continue  # the raw xattr said it already (GNU tar --xattrs writes both)
            if "acl" not in self.keep or link:
                self.change(path, f"ACL {name} dropped (task keeps no ACLs)")
                continue
            acl, dropped = acl_from_text(text)
            for entry in dropped:
                self.change(path, f"ACL entry {entry!r} of {name} dropped: only numeric ids "
                            "can be kept (pack with GNU tar --xattrs --xattrs-include='*')")
            if len(acl) > 4:
                kept[name] = acl.decode("utf-8", "surrogateescape")
        return _Meta(mode, m.mtime, uid, gid, tuple(sorted(kept.items())))

    def grow(self, size: int) -> None:
        self.total += size
        if self.total > self.limits.max_bytes:
            raise _TooLarge

    def header(self, info: tarfile.TarInfo) -> None:
        """Called for every header as tarfile meets it, before an extension record is read."""
        self.grow(tarfile.BLOCKSIZE)
        limit = MAX_EXTENSION_BYTES.get(info.type)
        if limit is not None:
            self.grow(info.size)
            if info.size > limit:
                raise _HeaderTooLarge(info.size, limit)

    def tarinfo_class(self) -> type[tarfile.TarInfo]:
        filt = self

        class _CountedInfo(tarfile.TarInfo):
            def _proc_member(self, tarfile_: tarfile.TarFile):  # type: ignore[override]
                filt.header(self)
                return super()._proc_member(tarfile_)  # type: ignore[misc]

        return _CountedInfo

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
        too_long = _name_problem(path, self.cwd)
        if too_long:
            return self.reject(path, too_long)
        top, _, rest = path.partition("/")
        self.tops.add(top)
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
            if rest and not self.sel.reason(rest):
                self.unrooted_hits += 1
            if m.isdir() and self.sel.is_parent(path):
                return None
            return self.reject(path, rule, by_rules=True, is_dir=m.isdir())
        if m.isdir():
            self.out.addfile(_out_info(path, tarfile.DIRTYPE, self.meta(path, m)))
            return self.accept(path, "dir")
        if (m.isreg() or m.islnk()) and path in self.parents:
            return self.reject(path, f"would replace directory {path!r} holding earlier members")
        if m.isreg():
            meta = self.meta(path, m)
            src = tar.extractfile(m)
            return self.write_file(path, meta, m.size, src)
        if m.islnk():
            target, bad = _normalize(m.linkname)
            if bad or target not in self.files:
                return self.reject(path, f"hardlink to {m.linkname!r}, which is not a regular file "
                                   "accepted earlier in the archive")
            start, size, meta = self.files[target]
            self.grow(size)
            return self.write_file(path, meta, size, _Slice(self.spool, start, size))
        # symlink: decided at the end, when every symlink of the archive is known
        if path in self.parents:
            return self.reject(path, f"symlink would replace directory {path!r} holding earlier "
                               "members")
        if m.linkname.startswith("/"):
            return self.reject(path, f"symlink to absolute path {_listed(m.linkname)!r}")
        if len(m.linkname.encode("utf-8", "surrogateescape")) >= PATH_MAX:
            return self.reject(path, f"symlink target longer than {PATH_MAX - 1} bytes")
        self.links[path] = (m.linkname, self.meta(path, m, link=True))
        return self.accept(path, "link")

    def write_file(self, path: str, meta: _Meta, size: int, src: Any) -> None:
        self.out.addfile(_out_info(path, tarfile.REGTYPE, meta, size), src)
        start = self.spool.tell() - (-(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE)
        self.files[path] = (start, size, meta)
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
        for path, (target, meta) in list(self.links.items()):
            resolved = self.resolve(path)
            if resolved is None:
                reason = f"symlink to {target!r} leaves the working directory (or loops)"
            elif resolved and self.sel.reason(resolved):
                reason = (f"symlink to {target!r} points outside the [submission] paths "
                          f"({self.sel.reason(resolved)})")
            elif not resolved and not self.sel.everything:
                reason = f"symlink to {target!r} points outside the [submission] paths"
            else:
                self.out.addfile(_out_info(path, tarfile.SYMTYPE, meta, linkname=target))
                continue
            self.members.pop(path, None)
            self.reject(path, reason)


    def wrong_root(self, cwd: str | None) -> str | None:
        """The common `docker cp ctr:/app -` mistake: everything under one top directory."""
        if len(self.tops) != 1:
            return None
        top = next(iter(self.tops))
        if self.kinds.get(top) not in (None, "dir"):
            return None
        named_like_cwd = cwd is not None and top == posixpath.basename(cwd.rstrip("/"))
        useless = not self.members and self.unrooted_hits > 0
        if not (useless or (named_like_cwd and self.sel.everything)):
            return None
        where = posixpath.join(cwd, top) if cwd else f"{top}/"
        return (f"the archive looks wrongly rooted: every member is under '{top}/', so it "
                f"lands in {where} (as `docker cp ctr:/{top} -` packs it); pack the contents "
                f"of the working directory instead: tar -C <dir> -czf sub.tar.gz .")


def _spool() -> BinaryIO:
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, prefix="sforge-sub-")  # type: ignore[return-value]


def filter_submission(archive: Path, rules: SubmissionRules,
                      limits: ArchiveLimits | None = None,
                      cwd: str | None = None) -> FilteredArchive:
    """Read `archive` (tar, tar.gz, tar.bz2, tar.xz) once and keep what is safe and selected.

    `cwd` is where the judge extracts it: names too long to create under it are rejected,
    and the wrongly-rooted-archive warning is sharper.

    Raises ArchiveError if it is not a readable tar archive; InfrastructureError if the
    filtered copy cannot be written (disk full). A cap overrun is not an exception: see
    `FilteredArchive.refused`.
    """
    limits = limits or ArchiveLimits()
    archive = Path(archive)
    try:
        src = archive.open("rb")
    except OSError as exc:  # the file, not its content: not a verdict about the submission
        raise InfrastructureError(f"cannot read submission archive {archive}: {exc}") from None
    spool = _spool()
    out = tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT,  # noqa: SIM115
                       encoding="utf-8", errors="surrogateescape")
    filt = _Filter(rules, limits, out, spool, cwd or "/")
    cap = limits.max_bytes + (limits.max_members + 4) * _HEADER_ALLOWANCE
    try:
        with src:
            reader = _CappedReader(_decompressed(src), cap)
            with tarfile.open(fileobj=reader, mode="r|",  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape",
                              tarinfo=filt.tarinfo_class()) as tar:
                for member in tar:
                    filt.add(tar, member)
        filt.finish_links()
        out.close()
    except _HeaderTooLarge as exc:
        spool.close()
        reason = (f"archive has a {exc.size}-byte long-name or pax header (over {exc.limit} "
                  "bytes: longer than any name the platform can create)")
        return FilteredArchive(data=_spool(), size=0, refused=reason)
    except _TooLarge:
        spool.close()
        reason = (f"archive exceeds {limits.max_members} members"
                  if filt.count > limits.max_members
                  else f"archive exceeds {limits.max_bytes} bytes uncompressed")
        return FilteredArchive(data=_spool(), size=0, refused=reason)
    except _TooManyXattrs as exc:
        spool.close()
        return FilteredArchive(data=_spool(), size=0, refused=f"member {exc} has more than "
                               f"{MAX_XATTRS} extended attributes")
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
    changed = filt.changed
    if filt.changed_omitted:
        changed.append(Changed(path="…", change=f"{filt.changed_omitted} more changed members "
                               "not listed"))
    warning = filt.wrong_root(cwd)
    return FilteredArchive(data=spool, size=size, members=list(filt.members), rejected=rejected,
                           changed=changed, warnings=[warning] if warning else [])
