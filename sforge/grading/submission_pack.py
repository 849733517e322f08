"""A workspace packed as the agent's `sforge-submit` packs it: only what `[submission] paths`
select, with `exclude` applied (sforge.grading.selection.Selection, the judge's own rule), as
a .tar.gz with no timestamps of its own (the same members in the same order give the same
bytes), spooled to a temporary file: no member's bytes are held in memory."""

from __future__ import annotations

import copy
import gzip
import shutil
import tarfile
import tempfile
from typing import IO

from sforge.benchmark.model import SubmissionRules
from sforge.grading.selection import Selection, clean_path


class _Body:
    """Where one regular member's bytes go as they are read (exactly its size, then close)."""

    def __init__(self, pack: SubmissionPack, size: int):
        self._pack, self._left = pack, size

    def write(self, chunk: bytes) -> None:
        """Pack one more chunk of the member."""
        if len(chunk) > self._left:
            raise ValueError("more bytes than the member's size")
        self._left -= len(chunk)
        self._pack.raw_write(chunk)

    def close(self) -> None:
        """The member is complete: padded to a whole tar block."""
        if self._left:
            raise ValueError(f"{self._left} bytes of the member never came")
        self._pack.end_member()


class SubmissionPack:
    """The selected members of a workspace (names relative to cwd), packed as they come:
    directories, regular files, symlinks, and hard links to a file packed before (a hard link
    to anything else is the caller's to pack as a regular file, with `add`); devices, FIFOs
    and whatever the rules leave out are skipped, as sforge-submit skips them."""

    def __init__(self, rules: SubmissionRules):
        self.selection = Selection(rules)
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by its reader
        # filename="": the temporary file's name never reaches the gzip header
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self.file, mtime=0)
        self._written = 0
        self.files: set[str] = set()  # regular files packed: what a hard link may name

    def selects(self, name: str) -> bool:
        """Whether the task's rules select the workspace path `name`."""
        return self.selection.reason(name) is None

    def raw_write(self, data: bytes) -> None:
        """Append bytes to the uncompressed tar stream."""
        self._gz.write(data)
        self._written += len(data)

    def end_member(self) -> None:
        """Pad the stream to a whole tar block."""
        if rest := self._written % tarfile.BLOCKSIZE:
            self.raw_write(tarfile.NUL * (tarfile.BLOCKSIZE - rest))

    def start(self, member: tarfile.TarInfo) -> _Body | None:
        """Pack `member`'s header if the rules select it and it is of a kind submitted; for
        a regular file, → where its `size` bytes go (the caller writes them, then closes
        it). None: nothing (more) to write."""
        name = member.name
        kind_ok = (member.isreg() or member.isdir() or member.issym()
                   or (member.islnk() and member.linkname in self.files))
        if not kind_ok or not name or not self.selects(name):
            return None
        info = copy.copy(member)
        info.pax_headers = dict(member.pax_headers)
        if info.isreg():
            self.files.add(name)
        else:
            info.size = 0
        self.raw_write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        if not info.isreg():
            return None
        return _Body(self, info.size)

    def add(self, member: tarfile.TarInfo, data: IO[bytes] | None = None) -> None:
        """Pack `member` if selected, a regular file's bytes read from `data`."""
        body = self.start(member)
        if body is not None:
            assert data is not None, "a regular file needs its bytes"
            shutil.copyfileobj(data, body, 1 << 20)  # type: ignore[misc]
            body.close()

    def finish(self) -> IO[bytes]:
        """The archive: the tar's end blocks written, the file rewound (the caller closes it)."""
        self.raw_write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
        if rest := self._written % tarfile.RECORDSIZE:
            self.raw_write(tarfile.NUL * (tarfile.RECORDSIZE - rest))
        self._gz.close()
        self.file.seek(0)
        return self.file


def pack_selected(tar: tarfile.TarFile, rules: SubmissionRules) -> IO[bytes]:
    """What `rules` select of a tar of cwd (a seekable archive, names relative to cwd, "./x"
    as "x"), packed as sforge-submit packs it; a hard link whose file is not packed is packed
    as a regular file. → an open temporary file at its start (the caller closes it)."""
    pack = SubmissionPack(rules)
    for m in tar:
        info = copy.copy(m)
        info.name = clean_path(m.name)
        if m.islnk():
            info.linkname = clean_path(m.linkname)
            if info.linkname not in pack.files:
                target = tar.getmember(m.linkname)  # the bytes come from the file it names
                info.type, info.linkname, info.size = tarfile.REGTYPE, "", target.size
        pack.add(info, tar.extractfile(m) if info.isreg() else None)
    return pack.finish()
