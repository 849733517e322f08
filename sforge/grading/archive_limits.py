"""The caps on a submission archive and the platform's limits on the names it may create."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass

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
HEADER_ALLOWANCE = 8 << 10
MAX_XATTRS = 64  # per member; more is refused as a whole, like an oversized archive
# Extension headers (long name, long link, pax) before one member: tools write at most three
# (GNU tar: long link + long name; git archive: a global pax header + an extended one). tarfile
# reads such a run recursively, holding each record, so a longer run refuses the archive.
MAX_EXTENSION_CHAIN = 8
# Linux follows at most this many symlinks in one lookup (MAXSYMLINKS); a deeper chain is
# rejected, as the judge could not follow it either.
MAX_SYMLINK_DEPTH = 40
# Ranges a header keeps as written; values outside them are normalised (and listed): an mtime
# into what a ustar header holds (1970 to 2242), an owner outside uid_t (or (uid_t)-1) to 0.
MAX_MTIME = 8**11 - 1
MAX_ID = 2**32 - 2
# The kernel's limit on an xattr name, and the room kept xattrs (ACLs included) may take per
# member, counted as ext4 stores them in its one 4 KiB xattr block (16 bytes per entry, name
# and value padded to 4 bytes; 4060 bytes usable, some left for the filesystem's own).
XATTR_NAME_MAX = 255
XATTR_SPACE = 4000


@dataclass(frozen=True)
class ArchiveLimits:
    """The caps on a submission: these defaults are the only ones; config.yaml's
    archive_limits overrides them (sforge.grading.contract.archive_limits)."""

    max_members: int = DEFAULT_MAX_MEMBERS
    max_bytes: int = DEFAULT_MAX_BYTES  # total uncompressed bytes: file data and headers
