"""`sforge check --integrity`, the git part: a repository in the work image must hold nothing
beyond HEAD (no other branch, tag, reflog entry or unreachable object an agent could check
out or cat) and no canary in any object. Every repository of the image is copied out of the
export and read with this machine's git, never the image's; one that cannot be read cannot
be proven clean, and says so."""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sforge.benchmark.model import Task
from sforge.check.findings import Finding

GIT_CAP = 1 << 30  # the bytes of repositories copied out to inspect, all of them together
_CHUNK = 1 << 20


def repo_part(path: str) -> str | None:
    """The folder of the repository an image path lies in: the path up to its first
    component named `.git` or `<name>.git` (a bare repository); None outside any."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part == ".git" or (part.endswith(".git") and len(part) > 4):
            return "/".join(parts[:i + 1])
    return None


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@dataclass
class GitCopy:
    """The repositories of an exported image, copied under `root` at their image paths."""
    root: Path
    size: int = 0
    over_cap: bool = False
    links: set[str] = field(default_factory=set)  # symlinks inside repositories, not copied

    def take(self, m: tarfile.TarInfo, path: str, content: Callable[[], IO[bytes] | None]) -> bool:
        """Copy the member at image path `path` if it lies in a repository; → whether it
        does (the caller then has nothing more to do with it)."""
        if repo_part(path) is None:
            return False
        dest = self.root / path.lstrip("/")
        if m.isdir():
            dest.mkdir(parents=True, exist_ok=True)
        elif m.issym():  # never followed on this machine: the repository may be unreadable
            self.links.add(path)
        elif m.isreg() or m.islnk():
            if m.islnk():
                src_path = self.root / posixpath.normpath(m.linkname).lstrip("./")
                size = src_path.stat().st_size if src_path.is_file() else 0
            else:
                size = m.size
            self.size += size
            if self.size > GIT_CAP:
                self.over_cap = True
                return True
            dest.parent.mkdir(parents=True, exist_ok=True)
            if m.islnk():
                if src_path.is_file():
                    shutil.copyfile(src_path, dest)
                return True
            src = content()
            if src is not None:
                with dest.open("wb") as out:
                    shutil.copyfileobj(src, out)
        return True

    def repositories(self) -> list[str]:
        """The image paths of the repositories copied: folders with a HEAD and objects/."""
        found = []
        for here, dirs, files in os.walk(self.root):
            if "HEAD" in files and "objects" in dirs:
                found.append("/" + Path(here).relative_to(self.root).as_posix())
        return sorted(found)

    def local(self, image_path: str) -> Path:
        """Where the repository at `image_path` was copied, its alternates pointed at the
        copies (an absolute alternate names a path in the image)."""
        repo = self.root / image_path.lstrip("/")
        alternates = repo / "objects" / "info" / "alternates"
        if alternates.is_file():
            lines = alternates.read_text(errors="replace").splitlines()
            alternates.write_text("".join(
                f"{self.root / ln.lstrip('/')}\n" if ln.startswith("/") else f"{ln}\n"
                for ln in lines))
        return repo


def _git(git: str, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([git, f"--git-dir={repo}", *args], capture_output=True, text=True,
                          timeout=300, env={"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo),
                                            "PATH": "/usr/bin:/bin"})


def _objects_hold(git: str, repo: Path, needle: bytes) -> bool:
    """Whether any object of the repository (reachable or not, loose or packed), as git
    inflates it, holds `needle`."""
    proc = subprocess.Popen([git, f"--git-dir={repo}", "cat-file", "--batch-all-objects",
                             "--batch"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo),
                                 "PATH": "/usr/bin:/bin"})
    assert proc.stdout is not None
    tail, seen = b"", False
    try:
        while chunk := proc.stdout.read(_CHUNK):
            if needle in tail + chunk:
                seen = True
                break
            tail = chunk[-len(needle):]
    finally:
        proc.kill()
        proc.wait()
    return seen


def repo_findings(git: str, copy: GitCopy, image_path: str, task: Task,
                  canary: bytes | None) -> list[Finding]:
    """What one repository of the work image holds beyond HEAD (errors in the workspace,
    warnings elsewhere in the image)."""
    where = task.dir / "environment" / "Dockerfile"
    cwd = posixpath.normpath(task.environment.cwd)
    severity = "error" if _under(image_path, cwd) else "warning"
    repo = copy.local(image_path)
    head = _git(git, repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    has_head = head.returncode == 0
    ahead = _git(git, repo, "rev-list", "--all", "--reflog", *(["--not", "HEAD"] if has_head
                                                               else []))
    fsck = _git(git, repo, "fsck", "--unreachable", "--no-reflogs", "--no-progress")
    failed = next((p for p in (ahead, fsck) if p.returncode != 0), None)
    if failed is not None:
        why = (failed.stderr.strip().splitlines() or ["no output"])[-1]
        links = [p for p in copy.links if _under(p, image_path)]
        if links:
            why += f"; symlinks inside it are not followed ({sorted(links)[0]})"
        return [Finding(where, None, "integrity-git",
                        f"{image_path} in the work image is a git repository this machine's "
                        f"git cannot read ({why[:200]}): what it holds beyond HEAD cannot be "
                        "checked; ship a plain repository with only HEAD's history, or none",
                        severity)]
    words = fsck.stdout.split()
    unreachable = [(words[i + 1], words[i + 2]) for i in range(len(words) - 2)
                   if words[i] == "unreachable"]
    commits = set(ahead.stdout.split()) | {sha for kind, sha in unreachable if kind == "commit"}
    others = sum(1 for kind, _ in unreachable if kind != "commit")
    out = []
    if commits or others:
        example = sorted(commits)[0][:12] if commits else "an unreachable object"
        out.append(Finding(where, None, "integrity-git",
                           f"{image_path} in the work image holds {len(commits)} commit(s) not "
                           f"reachable from HEAD and {others} other unreachable object(s) "
                           f"(e.g. {example}): other branches, tags, reflogs or dangling "
                           "objects can show the solution; ship a fresh repository with only "
                           "HEAD's history (git clone --single-branch, no reflog, git gc "
                           "--prune=now)", severity))
    if canary and _objects_hold(git, repo, canary):
        out.append(Finding(where, None, "integrity-canary",
                           f"the canary string is in a git object of {image_path} in "
                           f"{task.id}'s work image: a hidden file was committed there",
                           severity))
    return out


def git_findings(copy: GitCopy, task: Task, canary: bytes | None) -> list[Finding]:
    """The findings of every repository copied out of the work image."""
    where = task.dir / "environment" / "Dockerfile"
    repos = copy.repositories()
    if not repos and not copy.over_cap:
        return []
    if copy.over_cap:
        return [Finding(where, None, "integrity-git",
                        f"the work image's git repositories hold over {GIT_CAP >> 20} MiB: "
                        "too much to copy out and prove they hold nothing beyond HEAD; ship "
                        "a shallow clone (git clone --depth 1 --single-branch)")]
    git = shutil.which("git")
    if git is None:
        return [Finding(where, None, "integrity-git", f"{repos[0]} is a git repository in the "
                        "work image and git is not installed here to inspect it", "warning")]
    return [f for repo in repos for f in repo_findings(git, copy, repo, task, canary)]
