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
  judge turns it into the submission's invalid result. So does any other error tarfile
  raises on hostile headers (_PARSE_ERRORS): reading an archive ends in a verdict or an
  InfrastructureError, never another exception. A zero-byte file is not a tar
  archive; an archive with zero members is fine.
* Refused as a whole before tarfile holds what they describe: a sparse member (its map may
  be any length; no submission tool writes one), a negative size, and a run of more than
  MAX_EXTENSION_CHAIN extension headers (tarfile reads them recursively). tarfile's list of
  members read so far is emptied after each one, so memory is one member's headers.
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
  rejected. Link loops are rejected, and so are links nested more than MAX_SYMLINK_DEPTH deep.
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
  What the daemon or kernel would refuse at extraction is normalised or dropped here, and
  listed in `changed` (an error there would be Docker trouble, failing every later grade):
  mtime clamped to 0..MAX_MTIME, ids outside 0..MAX_ID become 0, ACLs checked by the
  kernel's rules (default ACLs on directories only), xattr names up to XATTR_NAME_MAX
  bytes, at most XATTR_SPACE bytes of xattrs per member.
* A wrongly rooted archive (everything under one top directory `app/`, as `docker cp ctr:/app -`
  makes) is detected: when nothing of it is selected but would be without that directory, or
  when the directory is named like cwd itself, `warnings` says so.
* Output: mtimes are kept (build tools care), in whole seconds. The tar is PAX format (long
  names, xattrs), names encoded as given (surrogateescape).
"""

from __future__ import annotations

import lzma
import struct
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from sforge.benchmark.model import SubmissionRules
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.archive_limits import (
    HEADER_ALLOWANCE,
    MAX_LISTED_NAME,
    MAX_XATTRS,
    ArchiveLimits,
)
from sforge.grading.member_filter import MemberFilter
from sforge.grading.results import Changed, Rejected
from sforge.grading.tar_metadata import TooManyXattrs
from sforge.grading.tar_stream import (
    CappedReader,
    Corrupt,
    HeaderTooLarge,
    Refused,
    TooLarge,
    decompressed,
    new_spool,
)

# What reading hostile input may raise besides tarfile's own errors (a pax number that is no
# number, a header recursion, a decoder's error): the archive is unreadable, never a traceback.
_PARSE_ERRORS = (ValueError, OverflowError, RecursionError, EOFError, IndexError, KeyError,
                 struct.error, zlib.error, lzma.LZMAError)


class ArchiveError(SforgeError):
    """The submission file is not a readable tar archive (not a verdict: nothing was graded)."""


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
        """The whole filtered tar as bytes; `data` is back at 0 afterwards."""
        self.data.seek(0)
        try:
            return self.data.read()
        finally:
            self.data.seek(0)

    def close(self) -> None:
        """Release the spool (its temporary file, if it went to disk)."""
        self.data.close()

    def __enter__(self) -> FilteredArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    spool = new_spool()
    out = tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT,  # noqa: SIM115
                       encoding="utf-8", errors="surrogateescape")
    filt = MemberFilter(rules, limits, out, spool, cwd or "/")
    cap = limits.max_bytes + (limits.max_members + 4) * HEADER_ALLOWANCE
    try:
        with src:
            reader = CappedReader(decompressed(src), cap)
            with tarfile.open(fileobj=reader, mode="r|",  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape",
                              tarinfo=filt.tarinfo_class()) as tar:
                while (member := tar.next()) is not None:
                    filt.add(tar, member)
                    tar.members.clear()  # held: one member's headers, never the archive's
        filt.finish_links()
        out.close()
    except HeaderTooLarge as exc:
        spool.close()
        reason = (f"archive has a {exc.size}-byte long-name or pax header (over {exc.limit} "
                  "bytes: longer than any name the platform can create)")
        return FilteredArchive(data=new_spool(), size=0, refused=reason)
    except TooLarge:
        spool.close()
        reason = (f"archive exceeds {limits.max_members} members"
                  if filt.count > limits.max_members
                  else f"archive exceeds {limits.max_bytes} bytes uncompressed")
        return FilteredArchive(data=new_spool(), size=0, refused=reason)
    except Refused as exc:
        spool.close()
        return FilteredArchive(data=new_spool(), size=0, refused=str(exc))
    except TooManyXattrs as exc:
        spool.close()
        return FilteredArchive(data=new_spool(), size=0, refused=f"member {exc} has more than "
                               f"{MAX_XATTRS} extended attributes")
    except Corrupt as exc:
        spool.close()
        raise ArchiveError(f"submission archive {archive} is corrupt: {exc}") from None
    except tarfile.TarError as exc:
        spool.close()
        raise ArchiveError(f"submission archive {archive} is not a readable tar archive "
                           f"(.tar or .tar.gz expected): {exc}") from None
    except OSError as exc:
        spool.close()
        raise InfrastructureError(f"cannot write the filtered copy of {archive}: {exc}") from None
    except _PARSE_ERRORS as exc:  # hostile input tarfile did not foresee: still a verdict
        spool.close()
        what = f"{type(exc).__name__}: {exc}"[:MAX_LISTED_NAME]
        raise ArchiveError(f"submission archive {archive} is not a readable tar archive "
                           f"({what})") from None
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
