"""One pass over an archive's members: each one kept (rewritten safe, under the task's
metadata rules) or rejected with its reason; symlinks decided last, once all are known."""

from __future__ import annotations

import math
import posixpath
import tarfile
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from sforge.benchmark.model import SubmissionRules
from sforge.grading.archive_limits import (
    MAX_EXTENSION_BYTES,
    MAX_EXTENSION_CHAIN,
    MAX_ID,
    MAX_LISTED_NAME,
    MAX_LISTED_REJECTED,
    MAX_MTIME,
    MAX_SYMLINK_DEPTH,
    MAX_XATTRS,
    NAME_MAX,
    PATH_MAX,
    XATTR_NAME_MAX,
    XATTR_SPACE,
    ArchiveLimits,
)
from sforge.grading.results import Changed, Rejected
from sforge.grading.selection import Selection, ancestors
from sforge.grading.tar_metadata import (
    ACL_TEXT,
    ACL_XATTRS,
    XATTR_PREFIX,
    MemberMeta,
    TooManyXattrs,
    acl_from_text,
    acl_valid,
    out_info,
    raw_bytes,
)
from sforge.grading.tar_stream import HeaderTooLarge, Refused, SpoolSlice, TooLarge


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


def _mtime(value: float) -> int:
    """An mtime as written: within 0..MAX_MTIME (not-a-number is 0)."""
    if math.isnan(value) or value <= 0:
        return 0
    return MAX_MTIME if value >= MAX_MTIME else int(value)


def _xattr_cost(name: str, value: str) -> int:
    """Bytes an xattr takes in ext4's xattr block: a 16-byte entry, name and value padded."""
    return 16 + -(-len(raw_bytes(name)) // 4) * 4 + -(-len(raw_bytes(value)) // 4) * 4


def _sparse(name: str) -> Refused:
    return Refused(f"sparse member {_listed(name)!r} not accepted (no submission tool writes "
                   "one: pack without --sparse)")


@dataclass
class _Walk:
    """One symlink being resolved: the directory reached so far and the target's parts left."""
    path: str
    here: list[str]
    parts: list[str]  # reversed: the next part is last
    depth: int = 1  # links nested in its resolution, itself included
    pending: str = ""  # a link met on the way, whose answer is awaited
    done: tuple[str | None, int, str] | None = field(default=None)


def _normalize(name: str) -> tuple[str, str | None]:
    """Member name → (path relative to cwd, None) or ("", reason). "" with no reason is cwd."""
    if name.startswith("/"):
        return "", "absolute path"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "", "'..' in path"
    return "/".join(parts), None


class MemberFilter:
    """The members of one archive as they stream by, and what was kept, changed, rejected."""

    def __init__(self, rules: SubmissionRules, limits: ArchiveLimits, out: tarfile.TarFile,
                 spool: BinaryIO, cwd: str = "/"):
        self.sel = Selection(rules)
        self.cwd = cwd
        self.limits = limits
        self.out = out
        self.spool = spool
        self.count = 0
        self.total = 0
        self.members: dict[str, None] = {}  # accepted paths, each at its latest position
        self.kinds: dict[str, str] = {}  # accepted path -> "file" | "dir" | "link"
        self.files: dict[str, tuple[int, int, MemberMeta]] = {}  # path -> data offset, size, meta
        self.links: dict[str, tuple[str, MemberMeta]] = {}  # pending symlinks: path -> target, meta
        self.parents: set[str] = set()  # directories that hold accepted members
        self.symlinks: set[str] = set()  # every symlink member's path, rejected ones too
        # symlink path -> (where it leads or None, links nested, why None: "leaves" | "loops" |
        # "deep"); memoized
        self.resolved: dict[str, tuple[str | None, int, str]] = {}
        self.chain = 0  # extension headers met in a row
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
        """List a member left out with its reason; the list is capped, the rest only counted."""
        if by_rules:
            if any(a in self.rule_dirs for a in ancestors(path)):
                return  # its directory is listed already, with the same kind of reason
            if is_dir:
                self.rule_dirs.add(path)
        if len(self.rejected) < MAX_LISTED_REJECTED:
            self.rejected.append(Rejected(path=_listed(path), reason=reason))
        else:
            self.omitted += 1

    def accept(self, path: str, kind: str) -> None:
        """Record a kept member as the latest at `path` of kind "file", "dir" or "link"."""
        self.members.pop(path, None)
        self.members[path] = None
        self.kinds[path] = kind
        self.parents.update(ancestors(path))
        if kind != "file":
            self.files.pop(path, None)
        if kind != "link":
            self.links.pop(path, None)
            self.symlinks.discard(path)

    def change(self, path: str, what: str) -> None:
        """List a change made to a kept member's metadata; capped like the rejected list."""
        if len(self.changed) < MAX_LISTED_REJECTED:
            self.changed.append(Changed(path=path, change=what))
        else:
            self.changed_omitted += 1

    def meta(self, path: str, m: tarfile.TarInfo, link: bool = False) -> MemberMeta:
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
        elif not (0 <= uid <= MAX_ID and 0 <= gid <= MAX_ID):
            new_uid, new_gid = (i if 0 <= i <= MAX_ID else 0 for i in (uid, gid))
            self.change(path, f"owner {uid}:{gid} -> {new_uid}:{new_gid} (outside the "
                        f"platform's ids, 0..{MAX_ID})")
            uid, gid = new_uid, new_gid
        mtime = _mtime(m.mtime)
        if not 0 <= m.mtime <= MAX_MTIME:  # NaN too
            self.change(path, f"mtime {m.mtime!r} -> {mtime} (outside what a tar header "
                        f"holds, 0..{MAX_MTIME})")
        xattrs: dict[str, str] = {}
        acl_text: dict[str, str] = {}
        for key, value in m.pax_headers.items():
            if key in ACL_TEXT:
                acl_text[ACL_TEXT[key]] = value
            elif key.startswith(XATTR_PREFIX):
                xattrs[key[len(XATTR_PREFIX):]] = value
        if len(xattrs) + len(acl_text) > MAX_XATTRS:
            raise TooManyXattrs(path)
        self.grow(sum(len(raw_bytes(k)) + len(raw_bytes(v)) for k, v in [*xattrs.items(),
                                                                 *acl_text.items()]))
        kept: dict[str, str] = {}
        for name, value in xattrs.items():
            shown = _listed(name).replace("\0", "\\x00")
            if name in ACL_XATTRS:
                if "acl" not in self.keep:
                    self.change(path, f"ACL {name} dropped (task keeps no ACLs)")
                elif link:
                    self.change(path, f"ACL {name} dropped (symlinks have none)")
                elif not acl_valid(raw_bytes(value)):
                    self.change(path, f"ACL {name} dropped: not a valid POSIX ACL")
                else:
                    kept[name] = value
            elif name.startswith("user."):
                if "xattr" not in self.keep or link:
                    self.change(path, f"xattr {shown} dropped (task keeps no xattrs)")
                elif name == "user." or "\0" in name:
                    self.change(path, f"xattr {shown} dropped: not a name the kernel accepts")
                elif len(raw_bytes(name)) > XATTR_NAME_MAX:
                    self.change(path, f"xattr {shown} dropped: name over {XATTR_NAME_MAX} bytes "
                                "(the platform's limit)")
                else:
                    kept[name] = value
            else:
                self.change(path, f"xattr {shown} dropped (only user.* xattrs and ACLs are "
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
            if acl_valid(acl):
                kept[name] = acl.decode("utf-8", "surrogateescape")
            elif len(acl) > 4:
                self.change(path, f"ACL {name} dropped: not a valid POSIX ACL")
        default = ACL_XATTRS[1]
        if default in kept and not m.isdir():
            del kept[default]
            self.change(path, f"ACL {default} dropped (only directories have a default ACL)")
        return MemberMeta(mode, mtime, uid, gid, self.fitting(path, kept))

    def fitting(self, path: str, kept: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """The kept xattrs that fit in XATTR_SPACE, ACLs first; each one left out is listed."""
        room = XATTR_SPACE
        fit = []
        for name, value in sorted(kept.items(), key=lambda kv: (kv[0] not in ACL_XATTRS,
                                                                kv[0])):
            cost = _xattr_cost(name, value)
            if cost > room:
                self.change(path, f"xattr {_listed(name)} dropped: the member's xattrs would "
                            f"exceed {XATTR_SPACE} bytes (what a filesystem holds per file)")
                continue
            room -= cost
            fit.append((name, value))
        return tuple(sorted(fit))

    def grow(self, size: int) -> None:
        """Count `size` bytes against the archive's bound; raises TooLarge beyond it."""
        self.total += size
        if self.total > self.limits.max_bytes:
            raise TooLarge

    def header(self, info: tarfile.TarInfo) -> None:
        """Called for every header as tarfile meets it, before an extension record is read."""
        self.grow(tarfile.BLOCKSIZE)
        if info.size < 0:
            raise Refused(f"member {_listed(info.name)!r} has a negative size")
        limit = MAX_EXTENSION_BYTES.get(info.type)
        self.chain = self.chain + 1 if limit is not None else 0
        if self.chain > MAX_EXTENSION_CHAIN:
            raise Refused(f"archive has more than {MAX_EXTENSION_CHAIN} extension headers in a "
                          "row (long-name or pax headers before one member)")
        if limit is not None:
            self.grow(info.size)
            if info.size > limit:
                raise HeaderTooLarge(info.size, limit)

    def tarinfo_class(self) -> type[tarfile.TarInfo]:
        """A TarInfo class that reports each header to `header` before its extensions are read,
        and refuses a sparse member before tarfile reads its map (a map of any length would
        be held in memory before any cap applies) and a negative size from a pax record."""
        filt = self

        class _CountedInfo(tarfile.TarInfo):
            def _proc_member(self, tarfile_: tarfile.TarFile):  # type: ignore[override]
                filt.header(self)
                return super()._proc_member(tarfile_)  # type: ignore[misc]

            def _proc_sparse(self, tarfile_: tarfile.TarFile):  # type: ignore[override]
                raise _sparse(self.name)  # old GNU 'S': its map continues in later blocks

            def _proc_gnusparse_00(self, next_: tarfile.TarInfo, pax: dict,  # type: ignore[override]
                                   buf: bytes) -> None:
                raise _sparse(pax.get("GNU.sparse.name", next_.name))

            def _proc_gnusparse_01(self, next_: tarfile.TarInfo,  # type: ignore[override]
                                   pax: dict) -> None:
                raise _sparse(pax.get("GNU.sparse.name", next_.name))

            def _proc_gnusparse_10(self, next_: tarfile.TarInfo, pax: dict,  # type: ignore[override]
                                   tarfile_: tarfile.TarFile) -> None:
                raise _sparse(pax.get("GNU.sparse.name", next_.name))

            def _apply_pax_info(self, pax: dict, encoding: str,  # type: ignore[override]
                                errors: str) -> None:
                if any(k.startswith("GNU.sparse.") for k in pax):
                    raise _sparse(pax.get("GNU.sparse.name", self.name))
                super()._apply_pax_info(pax, encoding, errors)  # type: ignore[misc]
                if self.size < 0:
                    raise Refused(f"member {_listed(self.name)!r} has a negative size")

        return _CountedInfo

    # -- one member ------------------------------------------------------------------------------
    def add(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        """Keep `m` (rewritten safe) or reject it with its reason; symlinks wait (finish_links)."""
        self.count += 1
        if self.count > self.limits.max_members:
            raise TooLarge
        if m.isreg() or m.type not in tarfile.SUPPORTED_TYPES:
            self.grow(m.size)  # from the header, before any data is read
        # A tar reader stops a name or link target at NUL (only a PAX record can carry one):
        # what lands would not be what was checked.
        if "\0" in m.name:
            return self.reject(m.name.replace("\0", "\\x00"), "NUL byte in name")
        path, bad = _normalize(m.name)
        if bad:
            return self.reject(m.name, bad)
        if not path:
            return None  # "." / "./": cwd itself
        too_long = _name_problem(path, self.cwd)
        if too_long:
            return self.reject(path, too_long)
        if (m.issym() or m.islnk()) and "\0" in m.linkname:
            return self.reject(path, f"NUL byte in link target {_listed(m.linkname)!r}")
        top, _, rest = path.partition("/")
        self.tops.add(top)
        for a in ancestors(path):
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
            self.out.addfile(out_info(path, tarfile.DIRTYPE, self.meta(path, m)))
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
            return self.write_file(path, meta, size, SpoolSlice(self.spool, start, size))
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

    def write_file(self, path: str, meta: MemberMeta, size: int, src: Any) -> None:
        """Copy a regular file's data into the output, remembering where it lies for hardlinks."""
        self.out.addfile(out_info(path, tarfile.REGTYPE, meta, size), src)
        start = self.spool.tell() - (-(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE)
        self.files[path] = (start, size, meta)
        self.accept(path, "file")

    # -- symlinks, last --------------------------------------------------------------------------
    def resolve(self, path: str) -> str | None:
        """Where the symlink at `path` leads (relative to cwd), or None if it leaves cwd, loops
        or nests more than MAX_SYMLINK_DEPTH links deep (why: `self.resolved[path][2]`).

        Iterative, with every link's answer memoized: a chain of any length costs no stack,
        and a hostile web of links costs linear time. A link met again while it is being
        resolved is a loop.
        """
        if path not in self.resolved:
            self._resolve_from(path)
        return self.resolved[path][0]

    def _walk(self, path: str) -> _Walk:
        target = self.links[path][0]
        return _Walk(path, path.split("/")[:-1], target.split("/")[::-1],
                     done=(None, 1, "leaves") if target.startswith("/") else None)

    def _resolve_from(self, start: str) -> None:
        stack = [self._walk(start)]
        active = {start}
        while stack:
            w = stack[-1]
            if w.done is None:
                self._step(w, stack, active)
            if w.done is not None:
                self.resolved[w.path] = w.done
                active.discard(w.path)
                stack.pop()

    def _step(self, w: _Walk, stack: list[_Walk], active: set[str]) -> None:
        """Advance `w` by one part of its target, or by the answer of the link it awaited;
        push a walk for a link met on the way. Sets `w.done` when it is decided."""
        if w.pending:
            where, depth, why = self.resolved[w.pending]
            w.pending = ""
            w.depth = max(w.depth, depth + 1)
            if where is None or w.depth > MAX_SYMLINK_DEPTH:
                w.done = (None, w.depth, why if where is None else "deep")
            else:
                w.here = where.split("/") if where else []
            return
        if not w.parts:
            w.done = ("/".join(w.here), w.depth, "")
            return
        part = w.parts.pop()
        if part in ("", "."):
            return
        if part == "..":
            if not w.here:
                w.done = (None, w.depth, "leaves")
            else:
                w.here.pop()
            return
        w.here.append(part)
        joined = "/".join(w.here)
        if joined not in self.links:
            return
        if joined in self.resolved:
            w.pending = joined
        elif joined in active:
            w.done = (None, w.depth, "loops")
        else:
            w.pending = joined
            stack.append(self._walk(joined))
            active.add(joined)

    def finish_links(self) -> None:
        """Decide the pending symlinks once all members are known: kept only inside the paths."""
        for path, (target, meta) in list(self.links.items()):
            resolved = self.resolve(path)
            if resolved is None and self.resolved[path][2] == "deep":
                reason = f"symlink to {target!r} follows more than {MAX_SYMLINK_DEPTH} symlinks"
            elif resolved is None:
                reason = f"symlink to {target!r} leaves the working directory (or loops)"
            elif resolved and self.sel.reason(resolved):
                reason = (f"symlink to {target!r} points outside the [submission] paths "
                          f"({self.sel.reason(resolved)})")
            elif not resolved and not self.sel.everything:
                reason = f"symlink to {target!r} points outside the [submission] paths"
            else:
                self.out.addfile(out_info(path, tarfile.SYMTYPE, meta, linkname=target))
                continue
            self.members.pop(path, None)
            self.reject(path, reason)


    def wrong_root(self, cwd: str | None) -> str | None:
        """The common `docker cp ctr:/app -` mistake: everything under one top directory.
        When that left every member refused, the warning says so (they land nowhere);
        when they were kept, it says where they land."""
        if len(self.tops) != 1:
            return None
        top = next(iter(self.tops))
        if self.kinds.get(top) not in (None, "dir"):
            return None
        named_like_cwd = cwd is not None and top == posixpath.basename(cwd.rstrip("/"))
        useless = not self.members and self.unrooted_hits > 0
        if useless:  # nothing kept, and without the top directory the paths would select
            return (f"the archive looks wrongly rooted: every member is under '{top}/', so "
                    f"each was refused (the [submission] paths name files of the working "
                    f"directory, not of '{top}/'); probably packed from the parent folder: "
                    f"pack from inside it: tar -C {top} -czf {top}.tar.gz .")
        if not (named_like_cwd and self.sel.everything):
            return None
        where = posixpath.join(cwd, top) if cwd else f"{top}/"
        return (f"the archive looks wrongly rooted: every member is under '{top}/', so it "
                f"lands in {where} (as `docker cp ctr:/{top} -` packs it); pack the contents "
                f"of the working directory instead: tar -C <dir> -czf sub.tar.gz .")
