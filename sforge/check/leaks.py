"""`sforge check --integrity`, part 1: nothing hidden reaches the work image.

The work image is read as the engine exports it (a container created, never started): no
file of the task's judge/ (by content, and by name in the workspace), no solution or
reference file, no git repository with anything beyond HEAD (sforge.check.git_leaks), no
benchmark canary in a file, a git object or an environment variable.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sforge.benchmark.model import Task
from sforge.check.findings import Finding
from sforge.check.git_leaks import GitCopy, git_findings, inside, repo_part
from sforge.check.image_files import exported
from sforge.check.streams import CHUNK, ByteSink, Needle, member_path
from sforge.containers.engine import ContainerEngine

MIN_BYTES = 16  # smaller files (empty __init__.py, a newline) match by chance
# Names too common to mean anything when the workspace has one too.
COMMON_NAMES = {"Dockerfile", "README", "README.md", "README.txt", "NOTES.md", "__init__.py",
                "requirements.txt", "Makefile", "LICENSE", ".gitignore", ".dockerignore",
                "setup.py", "pyproject.toml", "package.json", "conftest.py", "main.py",
                "run.sh", "config.json", "data.json"}
SOLUTION_PREFIXES = ("solution", "reference")


@dataclass
class Hidden:
    """What must not be in the work image: sha256 → the task file it is, and names."""
    by_hash: dict[str, Path] = field(default_factory=dict)
    sizes: set[int] = field(default_factory=set)
    # file name → (its path under judge/ or solution/, the file): a workspace path that
    # ends with that relative path is the hidden file by name (samples/x.csv is not data/x.csv)
    by_name: dict[str, list[tuple[str, Path]]] = field(default_factory=dict)
    # git's object id of each file as a blob (sha1 and sha256 repositories alike): a hidden
    # file committed to a repository of the image, whatever its name there
    by_git_id: dict[str, Path] = field(default_factory=dict)

    def add(self, path: Path, rel: str | None = None) -> None:
        """Remember a hidden file by content (unless tiny) and, given `rel`, by its path."""
        size = path.stat().st_size
        if size < MIN_BYTES:
            return
        header = b"blob %d\0" % size  # git's object header: its ids hash it first
        plain, git1, git256 = hashlib.sha256(), hashlib.sha1(header), hashlib.sha256(header)
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                for h in (plain, git1, git256):
                    h.update(chunk)
        self.by_hash.setdefault(plain.hexdigest(), path)
        for blob in (git1.hexdigest(), git256.hexdigest()):
            self.by_git_id.setdefault(blob, path)
        self.sizes.add(size)
        if rel is not None and path.name not in COMMON_NAMES:
            self.by_name.setdefault(path.name, []).append((rel, path))

    def named(self, rel: str) -> Path | None:
        """The hidden file whose relative path `rel` (a workspace path) ends with."""
        for suffix, path in self.by_name.get(posixpath.basename(rel), []):
            if rel == suffix or rel.endswith("/" + suffix):
                return path
        return None


def hidden_files(task: Task) -> Hidden:
    """judge/ (by content and name), solution/ and the reference archive (by content)."""
    hidden = Hidden()
    for folder in ("judge", "solution"):
        root = task.dir / folder
        if root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                    hidden.add(path, path.relative_to(root).as_posix())
    if task.reference and task.reference.archive:
        hidden.add(task.dir / task.reference.archive)
    return hidden


def _members(stream) -> Iterator[tuple[tarfile.TarInfo, str, tarfile.TarFile]]:
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            yield m, "/" + member_path(m.name), tar


def _scan(data: IO[bytes], want_hash: bool, canary: bytes | None,
          copies: list[ByteSink]) -> tuple[str | None, bool]:
    """(sha256 when asked, whether the canary is in it) of one member's bytes, read once
    (and written to each of `copies` on the way)."""
    h = hashlib.sha256() if want_hash else None
    search = Needle(canary)
    while chunk := data.read(CHUNK):
        if h is not None:
            h.update(chunk)
        search.feed(chunk)
        for copy in copies:
            copy.write(chunk)
    return (h.hexdigest() if h else None), search.found


# Given each exported member under cwd, → where its bytes go (the scan writes them all as it
# reads them, then closes it), or None.
Keep = Callable[[tarfile.TarInfo], ByteSink | None]


def leak_findings(engine: ContainerEngine, task: Task, work_tag: str, canary: str | None,
                  canary_file: Path, keep: Keep | None = None) -> list[Finding]:
    """Every leak of `task`'s hidden files into its work image `work_tag`; `keep` gets each
    member under cwd and its bytes (one export serves the no-op submission too)."""
    env = engine.image_env(work_tag)
    with exported(engine, work_tag, task.id) as stream:
        return scan_image(stream, task, canary, canary_file, keep, env)


def scan_image(stream: Any, task: Task, canary: str | None, canary_file: Path,
               keep: Keep | None = None, env: list[str] | None = None) -> list[Finding]:
    """The leak findings of one exported image (an uncompressed tar stream) and of its
    environment variables `env` ("NAME=value", what every process in it sees)."""
    hidden = hidden_files(task)
    cwd = posixpath.normpath(task.environment.cwd)
    dockerfile = task.dir / "environment" / "Dockerfile"
    needle = canary.encode() if canary else None
    out: list[Finding] = []
    for var in env or ():
        if needle and needle in var.encode():
            out.append(Finding(canary_file, None, "integrity-canary",
                               f"the canary string is in {task.id}'s work image's environment "
                               f"(ENV {var.partition('=')[0]}): a hidden value leaked into it "
                               f"(see {dockerfile})"))
    with tempfile.TemporaryDirectory(prefix="sforge-git-") as tmp:
        repos = GitCopy(Path(tmp))
        in_repos: list[tuple[str, Finding]] = []
        # image path of a regular file → what its content is (a hidden file, the canary):
        # a hard link to it is the same file under another name
        hits: dict[str, tuple[Path | None, bool]] = {}
        for m, path, tar in _members(stream):
            in_cwd = inside(path, cwd)
            rel = posixpath.relpath(path, cwd) if in_cwd else None
            kept = keep(m) if in_cwd and keep is not None else None
            copy = repos.take(m, path)  # a member of a repository is scanned all the same
            try:
                if (m.isreg() or m.islnk()) and rel is not None:
                    # names inside a repository are git's own (refs, logs): judged after it
                    named = _name_findings(path, rel, hidden, task)
                    if repo_part(path) is None:
                        out += named
                    else:
                        in_repos += [(path, f) for f in named]
                if m.isreg():
                    copies = [c for c in (copy, kept) if c is not None]
                    hit = _content_hit(m, tar, copies, hidden, needle)
                    if hit != (None, False):
                        hits[path] = hit
                        out += _hit_findings(path, *hit, task, canary_file)
                elif m.islnk() and rel is not None:  # the agent finds it under this name
                    hit = hits.get("/" + member_path(m.linkname), (None, False))
                    out += _hit_findings(path, *hit, task, canary_file)
            finally:
                for sink in (copy, kept):
                    if sink is not None:
                        sink.close()
        found = repos.repositories()
        out += [f for path, f in in_repos if not any(inside(path, r) for r in found)]
        out += git_findings(repos, task, needle, hidden.by_git_id)
    return out


def _name_findings(path: str, rel: str, hidden: Hidden, task: Task) -> list[Finding]:
    """The leaks a file (regular, or a hard link) at image path `path` is by its name
    (`rel`: its path relative to cwd, where names are looked at)."""
    dockerfile = task.dir / "environment" / "Dockerfile"
    out = []
    if posixpath.basename(path).lower().startswith(SOLUTION_PREFIXES):
        out.append(Finding(dockerfile, None, "integrity-solution",
                           f"the work image has {path} in the workspace: a solution "
                           "or reference file; keep it out of the work image"))
    src_path = hidden.named(rel)
    if src_path is not None:
        out.append(Finding(src_path, None, "integrity-leak",
                           f"a file of this name is in the work image at {path}: "
                           "make sure it is not the hidden one, or rename it",
                           "warning"))
    return out


def _content_hit(m: tarfile.TarInfo, tar: tarfile.TarFile, copies: list[ByteSink],
                 hidden: Hidden, needle: bytes | None) -> tuple[Path | None, bool]:
    """(the hidden file whose content a regular member has, whether the canary is in it);
    its bytes are read at most once, and written to each of `copies`."""
    want = m.size in hidden.sizes
    if not want and needle is None and not copies:
        return None, False
    data = tar.extractfile(m)
    if data is None:
        return None, False
    digest, seen = _scan(data, want, needle, copies)
    return (hidden.by_hash.get(digest) if digest is not None else None), seen


def _hit_findings(path: str, src: Path | None, seen: bool, task: Task,
                  canary_file: Path) -> list[Finding]:
    """The leaks the file at image path `path` is by its content: the hidden file `src`,
    the canary when `seen`."""
    out = []
    if src is not None:
        out.append(Finding(src, None, "integrity-leak",
                           f"this file's content is in the work image at {path}: "
                           "keep the judge's and the solution's files out of "
                           "environment/ and its Dockerfile"))
    if seen:
        out.append(Finding(canary_file, None, "integrity-canary",
                           f"the canary string is in {task.id}'s work image at "
                           f"{path}: a hidden file leaked into it (see "
                           f"{task.dir / 'environment' / 'Dockerfile'})"))
    return out
