"""`sforge check --integrity`, the archives it grades: the workspace as shipped (the no-op
submission) and cheat probes, each a small deterministic .tar.gz (same bytes each time, so
one eval key each, cached like any eval); and what their verdicts may be."""

from __future__ import annotations

import copy
import gzip
import io
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from sforge.benchmark.dockerfile import simple_commands, strip_prefix, tokenize_shell
from sforge.benchmark.model import SubmissionRules, Task
from sforge.check.streams import ByteSink, member_path
from sforge.grading.selection import under
from sforge.grading.submission_pack import SubmissionPack

FAKE_SCORE = 1e18
RESULT_JSON = f'{{"score": {FAKE_SCORE:g}, "valid": true, "summary": "probe"}}\n'
# Both a shell script and a Python module: run either way, it writes a fake result.json.
POLYGLOT = ("''':'\n"
            f"mkdir -p /opt/sforge; echo '{RESULT_JSON.strip()}' > /opt/sforge/result.json\n"
            "exit 0\n'''\n"
            "import os\nos.makedirs('/opt/sforge', exist_ok=True)\n"
            f"open('/opt/sforge/result.json', 'w').write({RESULT_JSON!r})\n")
DIR_GUESSES = ("main.py", "solve.py", "solution.py", "run.sh")


@dataclass(frozen=True)
class Probe:
    """One cheat attempt: its name, what it tries, the archive's bytes."""
    name: str
    what: str
    data: bytes


def packed(members: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A .tar.gz of `members` with no timestamps of its own: the same bytes every time."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _file(name: str, text: str, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    return info, None


class Workspace:
    """The no-op submission in the making, from the members of an exported image: what an
    agent that did nothing would submit with sforge-submit (only what `[submission]` selects
    under cwd, names relative to cwd; sforge.grading.submission_pack), and the directories
    in cwd. A hard link in cwd is packed as the file it is: its bytes come with the file it
    links to, or, when that one is outside cwd or not selected, from a second read of the
    export (`resolve`)."""

    def __init__(self, cwd: str, rules: SubmissionRules):
        self.root = member_path(cwd)  # "" when cwd is /
        self.pack = SubmissionPack(rules)
        self.dirs: set[str] = set()
        # image path of a file → the hard links in cwd that name it, still to pack
        self.pending: dict[str, list[tarfile.TarInfo]] = {}

    def _relative(self, name: str) -> str | None:
        """An image path's name relative to cwd; None outside cwd and for cwd itself."""
        path = member_path(name)
        if path == self.root or not under(path, self.root):
            return None
        return path[len(self.root) + 1:] if self.root else path

    def take(self, member: tarfile.TarInfo) -> ByteSink | None:
        """Take an exported member if it lies under cwd and is selected (renamed relative to
        cwd); → where a regular file's bytes go (the caller writes them all, then closes
        it), or None."""
        name = self._relative(member.name)
        if name is None:
            return None
        m = copy.copy(member)
        m.name = name
        if m.isdir():
            self.dirs.add(m.name)
        if m.islnk():
            target = self._relative(m.linkname)
            if target is None or target not in self.pack.files:
                if self.pack.selects(name):
                    self.pending.setdefault(member_path(m.linkname), []).append(m)
                return None
            m.linkname = target
        return self.pack.start(m)

    def resolve(self, stream: Any) -> None:
        """Pack the pending hard links as regular files, their bytes read from `stream` (the
        same export again, an uncompressed tar stream); a no-op when none is pending."""
        if not self.pending:
            return
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                links = self.pending.pop(member_path(m.name), None) if m.isreg() else None
                fh = tar.extractfile(m) if links else None
                if links and fh is not None:
                    with tempfile.TemporaryFile() as spool:
                        shutil.copyfileobj(fh, spool)
                        for link in links:
                            spool.seek(0)
                            info = copy.copy(link)
                            info.type, info.linkname, info.size = tarfile.REGTYPE, "", m.size
                            self.pack.add(info, spool)
                if not self.pending:
                    return

    def archive(self) -> IO[bytes]:
        """The workspace as a submission archive (.tar.gz, the same bytes every time), an
        open temporary file at its start (the caller closes it)."""
        return self.pack.finish()


def workspace_archive(stream: Any, cwd: str,
                      rules: SubmissionRules) -> tuple[bytes, set[str]]:
    """The no-op submission: what `rules` select in cwd of an exported image (an
    uncompressed, seekable tar stream) as a .tar.gz; and the directories in cwd."""
    ws = Workspace(cwd, rules)
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            sink = ws.take(m)
            fh = tar.extractfile(m) if sink is not None else None
            if sink is not None and fh is not None:
                shutil.copyfileobj(fh, sink)  # type: ignore[misc]
                sink.close()
    if ws.pending:
        stream.seek(0)
        ws.resolve(stream)
    with ws.archive() as out:
        return out.read(), ws.dirs


def targets(task: Task, dirs: set[str]) -> list[str]:
    """Where a submission puts its files: each [submission] path, and in a directory path a
    few usual names."""
    out = []
    for raw in task.submission.paths:
        path = posixpath.normpath(raw.strip()).lstrip("/")
        if path in ("", ".") or path in dirs or raw.endswith("/"):
            base = "" if path in ("", ".") else f"{path}/"
            out += [f"{base}{n}" for n in DIR_GUESSES]
        else:
            out.append(path)
    return out


def grader_paths_in_cwd(task: Task) -> list[str]:
    """The files `[judge] cmd` runs that lie in cwd (relative to it): a submission can
    replace them."""
    cwd = posixpath.normpath(task.environment.cwd)
    found = []
    for words in simple_commands(tokenize_shell([(1, task.judge.cmd)])):
        for w in strip_prefix(words)[:2]:
            text = w.text
            if "$" in text or text.startswith("-"):
                continue
            if text.startswith("/"):
                full = posixpath.normpath(text)
                if full.startswith(cwd.rstrip("/") + "/"):
                    found.append(posixpath.relpath(full, cwd))
            elif "/" in text or text.endswith((".py", ".sh", ".js", ".pl", ".rb")):
                found.append(posixpath.normpath(text))
    return [p for p in dict.fromkeys(found) if not p.startswith("..")]


def probes(task: Task, dirs: set[str], max_bytes: int) -> Iterator[Probe]:
    """Every cheat probe for `task` (`max_bytes`: the archive limit a huge file exceeds)."""
    cwd = posixpath.normpath(task.environment.cwd)
    depth = len([p for p in cwd.split("/") if p])
    spots = targets(task, dirs)
    yield Probe("result-json-in-cwd", "ships opt/sforge/result.json in cwd",
                packed([_file("opt/sforge/result.json", RESULT_JSON)]))
    yield Probe("result-json-absolute", "ships /opt/sforge/result.json by absolute path",
                packed([_file("/opt/sforge/result.json", RESULT_JSON)]))
    yield Probe("result-json-dotdot", "ships ../…/opt/sforge/result.json",
                packed([_file("../" * (depth + 1) + "opt/sforge/result.json", RESULT_JSON)]))
    yield Probe("writes-result-json", "submits code that writes /opt/sforge/result.json",
                packed([_file(p, POLYGLOT, 0o755) for p in spots]))
    grader = grader_paths_in_cwd(task)
    if grader:
        yield Probe("replaces-grader", f"replaces the grader's {', '.join(grader)} in cwd",
                    packed([_file(p, POLYGLOT, 0o755) for p in grader]))
    yield Probe("symlink-outside", "submits symlinks to paths outside cwd",
                packed([_link(p, "/opt/sforge/result.json") for p in spots]
                       + [_link("escape-root", "/"), _link("escape-up", "../" * (depth + 1))]))
    big = tarfile.TarInfo(spots[0])
    big.size = 1
    real = str(max_bytes * 2 + 1)
    big.pax_headers = {"GNU.sparse.major": "0", "GNU.sparse.minor": "1",
                       "GNU.sparse.name": spots[0], "GNU.sparse.realsize": real,
                       "GNU.sparse.size": real, "GNU.sparse.map": "0,1"}
    yield Probe("huge-sparse-file", f"a sparse file of {real} bytes, over the archive limit",
                packed([(big, b"x")]))
    modes = []
    for p in spots:
        info, data = _file(p, POLYGLOT, 0o6777)
        info.uid = info.gid = 0
        modes.append((info, data))
    yield Probe("setuid-world-writable", "submits setuid, world-writable files", packed(modes))
