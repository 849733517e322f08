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


@dataclass(frozen=True)
class ArchiveLimits:
    """The caps on a submission: these defaults are the only ones; config.yaml's
    archive_limits overrides them (sforge.grading.contract.archive_limits)."""

    max_members: int = DEFAULT_MAX_MEMBERS
    max_bytes: int = DEFAULT_MAX_BYTES  # total uncompressed bytes: file data and headers
