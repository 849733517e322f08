"""`sforge check --integrity`, part 1: nothing hidden reaches the work image.

The work image is read as the engine exports it (a container created, never started): no
file of the task's judge/ (by content, and by name in the workspace), no solution or
reference file, no `.git` in the workspace with commits beyond HEAD, no benchmark canary.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sforge.benchmark.model import Task
from sforge.check.findings import Finding
from sforge.check.image_files import exported
from sforge.containers.engine import ContainerEngine

MIN_BYTES = 16  # smaller files (empty __init__.py, a newline) match by chance
# Names too common to mean anything when the workspace has one too.
COMMON_NAMES = {"Dockerfile", "README", "README.md", "README.txt", "NOTES.md", "__init__.py",
                "requirements.txt", "Makefile", "LICENSE", ".gitignore", ".dockerignore",
                "setup.py", "pyproject.toml", "package.json", "conftest.py", "main.py",
                "run.sh", "config.json", "data.json"}
SOLUTION_PREFIXES = ("solution", "reference")
GIT_CAP = 1 << 30  # a workspace .git bigger than this is not copied out to inspect
_CHUNK = 1 << 20


@dataclass
class Hidden:
    """What must not be in the work image: sha256 → the task file it is, and names."""
    by_hash: dict[str, Path] = field(default_factory=dict)
    sizes: set[int] = field(default_factory=set)
    # file name → (its path under judge/ or solution/, the file): a workspace path that
    # ends with that relative path is the hidden file by name (samples/x.csv is not data/x.csv)
    by_name: dict[str, list[tuple[str, Path]]] = field(default_factory=dict)

    def add(self, path: Path, rel: str | None = None) -> None:
        """Remember a hidden file by content (unless tiny) and, given `rel`, by its path."""
        size = path.stat().st_size
        if size < MIN_BYTES:
            return
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self.by_hash.setdefault(digest, path)
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


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _members(stream) -> Iterator[tuple[tarfile.TarInfo, str, tarfile.TarFile]]:
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            yield m, "/" + posixpath.normpath(m.name).lstrip("./"), tar


def _scan(data, want_hash: bool, canary: bytes | None) -> tuple[str | None, bool]:
    """(sha256 when asked, whether the canary is in it) of one member's bytes."""
    h = hashlib.sha256() if want_hash else None
    seen, tail = False, b""
    while chunk := data.read(_CHUNK):
        if h is not None:
            h.update(chunk)
        if canary and not seen:
            seen = canary in tail + chunk
            tail = chunk[-len(canary):]
    return (h.hexdigest() if h else None), seen


Keep = Callable[[tarfile.TarInfo, bytes | None], None]


def leak_findings(engine: ContainerEngine, task: Task, work_tag: str, canary: str | None,
                  canary_file: Path, keep: Keep | None = None) -> list[Finding]:
    """Every leak of `task`'s hidden files into its work image `work_tag`; `keep` gets each
    member under cwd with its bytes (one export serves the no-op submission too)."""
    with exported(engine, work_tag, task.id) as stream:
        return scan_image(stream, task, canary, canary_file, keep)


def scan_image(stream: Any, task: Task, canary: str | None, canary_file: Path,
               keep: Keep | None = None) -> list[Finding]:
    """The leak findings of one exported image (an uncompressed tar stream)."""
    hidden = hidden_files(task)
    cwd = posixpath.normpath(task.environment.cwd)
    dockerfile = task.dir / "environment" / "Dockerfile"
    needle = canary.encode() if canary else None
    out: list[Finding] = []
    has_git = False
    with tempfile.TemporaryDirectory(prefix="sforge-git-") as tmp:
        git_root = Path(tmp)
        git_bytes = 0
        for m, path, tar in _members(stream):
            in_cwd = _under(path, cwd)
            rel = posixpath.relpath(path, cwd) if in_cwd else ""
            body: bytes | None = None
            if in_cwd and keep is not None:
                fh = tar.extractfile(m) if m.isreg() else None
                body = fh.read() if fh is not None else None
                keep(m, body)

            def content(m: tarfile.TarInfo = m, body: bytes | None = body,
                        tar: tarfile.TarFile = tar) -> IO[bytes] | None:
                return io.BytesIO(body) if body is not None else tar.extractfile(m)

            if in_cwd and _under(rel, ".git") and git_bytes <= GIT_CAP:
                has_git = True
                if m.isreg():
                    git_bytes += m.size
                    dest = git_root / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    src = content()
                    if src is not None:
                        with dest.open("wb") as fh_out:
                            shutil.copyfileobj(src, fh_out)
                elif m.isdir():
                    (git_root / rel).mkdir(parents=True, exist_ok=True)
                continue
            if not m.isreg():
                continue
            name = posixpath.basename(path)
            if in_cwd and name.lower().startswith(SOLUTION_PREFIXES):
                out.append(Finding(dockerfile, None, "integrity-solution",
                                   f"the work image has {path} in the workspace: a solution "
                                   "or reference file; keep it out of the work image"))
            src_path = hidden.named(rel) if in_cwd else None
            if src_path is not None:
                out.append(Finding(src_path, None, "integrity-leak",
                                   f"a file of this name is in the work image at {path}: "
                                   "make sure it is not the hidden one, or rename it",
                                   "warning"))
            want = m.size in hidden.sizes
            if not want and needle is None:
                continue
            data = content()
            if data is None:
                continue
            digest, seen = _scan(data, want, needle)
            if digest is not None and digest in hidden.by_hash:
                src_path = hidden.by_hash[digest]
                out.append(Finding(src_path, None, "integrity-leak",
                                   f"this file's content is in the work image at {path}: "
                                   "keep the judge's and the solution's files out of "
                                   "environment/ and its Dockerfile"))
            if seen:
                out.append(Finding(canary_file, None, "integrity-canary",
                                   f"the canary string is in {task.id}'s work image at "
                                   f"{path}: a hidden file leaked into it (see "
                                   f"{dockerfile})"))
        if has_git:
            out += git_findings(git_root / ".git", task, cwd)
    return out


def git_findings(git_dir: Path, task: Task, cwd: str) -> list[Finding]:
    """A workspace .git must hold nothing beyond HEAD: other refs, reflogs and loose or
    packed commits not reachable from HEAD are later states an agent could check out.
    Read with this machine's git on a copy, never with the image's."""
    where = task.dir / "environment" / "Dockerfile"
    git = shutil.which("git")
    if git is None:
        return [Finding(where, None, "integrity-git", f"{cwd}/.git is in the work image and "
                        "git is not installed here to inspect it", "warning")]

    def run(*args: str) -> list[str]:
        proc = subprocess.run([git, f"--git-dir={git_dir}", *args], capture_output=True,
                              text=True, timeout=300,
                              env={"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(git_dir),
                                   "PATH": "/usr/bin:/bin"})
        return proc.stdout.split() if proc.returncode == 0 else []

    head = run("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    ahead = run("rev-list", "--all", "--reflog", *(["--not", "HEAD"] if head else []))
    loose = run("fsck", "--unreachable", "--no-reflogs", "--no-progress")
    orphans = [loose[i + 2] for i in range(0, len(loose) - 2)
               if loose[i] == "unreachable" and loose[i + 1] == "commit"]
    extra = sorted(set(ahead) | set(orphans))
    if not extra:
        return []
    return [Finding(where, None, "integrity-git",
                    f"{cwd}/.git in the work image holds {len(extra)} commit(s) not reachable "
                    f"from HEAD (e.g. {extra[0][:12]}): other branches, tags, reflogs or "
                    "dangling objects can show the solution; ship a fresh repository with "
                    "only HEAD's history (git clone --single-branch, no reflog)")]
