"""`sforge check --integrity`, the git part: a repository in the work image must hold nothing
beyond HEAD (no other branch, tag, reflog entry or unreachable object an agent could check out
or cat), and no object, HEAD's history included, holds the canary or a hidden file. Every
repository of the image is copied out of the export and read with this machine's git, never the
image's, and with no configuration of the image: the copy's config is written afresh, so
nothing the image names runs here. One that cannot be read or copied cannot be proven clean,
and says so."""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sforge.benchmark.model import Task
from sforge.check.findings import Finding
from sforge.check.streams import CHUNK, Needle, member_path
from sforge.grading.selection import under

# Bounds of the work on one repository (module globals, read at each use).
GIT_CAP = 1 << 30  # bytes of one repository copied out to inspect
OBJECTS_CAP = 8 << 30  # bytes of inflated objects read in the canary search
GIT_TIMEOUT = 300  # seconds of one git command
_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)\s*(?:"[^"]*"\s*)?\]')
_ENTRY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*=\s*(.*?)\s*$")
_FORMATS = ("sha1", "sha256")


class CannotCheck(Exception):
    """A repository this check cannot read to the end; the message says why."""


def repo_part(path: str) -> str | None:
    """The folder of the repository an image path lies in: the path up to its first
    component named `.git` or `<name>.git` (a bare repository); None outside any."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part == ".git" or (part.endswith(".git") and len(part) > 4):
            return "/".join(parts[:i + 1])
    return None


def inside(path: str, folder: str) -> bool:
    """Image path `path` is `folder` or lies in it (`/` holds every path)."""
    return under(path, folder.rstrip("/"))


def severity(repo: str, cwd: str) -> str:
    """An error when the workspace sees the repository at image path `repo` (it lies in
    cwd, or cwd lies in its work tree, where git in cwd finds it), else a warning."""
    tree = posixpath.dirname(repo) if posixpath.basename(repo) == ".git" else repo
    return "error" if inside(repo, cwd) or inside(cwd, tree) else "warning"


def git_command(git: str, repo: Path, home: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one git command on a copied repository: git reads no
    configuration but the copy's own (written afresh), no system, global or image file, runs
    no hook or fsmonitor, fetches nothing and sees no variable of this process."""
    argv = [git, "-c", "core.fsmonitor=false", "-c", "protocol.allow=never",
            "-c", "core.hooksPath=/dev/null", f"--git-dir={repo}", *args]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0",
           "GIT_CEILING_DIRECTORIES": str(home.parent)}
    return argv, env


def object_format(config: Path) -> str | None:
    """`extensions.objectformat` of a repository's config file, when it names a format this
    check knows; the file is only parsed, never handed to git."""
    section, found = "", None
    for line in config.read_text(errors="replace").splitlines():
        if m := _SECTION.match(line):
            section = m.group(1).lower()
        elif (m := _ENTRY.match(line)) and section == "extensions" \
                and m.group(1).lower() == "objectformat":
            found = m.group(2).strip('"').lower()
    return found if found in _FORMATS else None


class Sink:
    """Where a regular member's bytes are copied as the scan reads them; a failed write
    drops the repository (it cannot be checked) and the scan goes on."""

    def __init__(self, copy: GitCopy, part: str, out: IO[bytes]):
        self._copy, self._part = copy, part
        self._out: IO[bytes] | None = out

    def write(self, chunk: bytes) -> None:
        """Copy one more chunk of the member."""
        if self._out is None:
            return
        try:
            self._out.write(chunk)
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        """The member is complete (or dropped with its repository)."""
        if self._out is None:
            return
        try:
            self._out.close()
        except OSError as exc:
            self._fail(exc)
        self._out = None

    def _fail(self, exc: OSError) -> None:
        out, self._out = self._out, None
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()
        self._copy.drop(self._part, f"could not be copied out ({exc.strerror or exc})")


@dataclass
class GitCopy:
    """The repositories of an exported image, copied under `root`/image at their image paths
    (`root`/home is git's empty home). A repository is copied up to GIT_CAP bytes; one that
    is not copied whole is in `unreadable`, with why."""
    root: Path
    sizes: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    links: set[str] = field(default_factory=set)  # symlinks inside repositories, not copied
    gitfiles: set[str] = field(default_factory=set)  # regular files named .git
    _found: list[str] | None = None

    def __post_init__(self) -> None:
        self.tree = self.root / "image"
        self.home = self.root / "home"
        self.tree.mkdir(exist_ok=True)
        self.home.mkdir(exist_ok=True)

    def take(self, m: tarfile.TarInfo, path: str) -> Sink | None:
        """Copy the member at image path `path` if it lies in a repository: a folder or a
        hard link now, a regular file through the sink returned (the caller writes its
        bytes there as it reads them, and closes it); None when there is nothing to write."""
        part = repo_part(path)
        if part is None or part in self.unreadable:
            return None
        dest = self.tree / member_path(path)
        try:
            if m.isdir():
                dest.mkdir(parents=True, exist_ok=True)
            elif m.issym():  # never followed on this machine: the repository may be unreadable
                self.links.add(path)
                if path == part and posixpath.basename(path) == ".git":
                    self.drop(part, f"is a symlink to {m.linkname}, which this check does not "
                                    "follow")
            elif m.isreg() or m.islnk():
                src = self.tree / member_path(m.linkname) if m.islnk() else None
                size = (src.stat().st_size if src.is_file() else 0) if src else m.size
                self.sizes[part] = self.sizes.get(part, 0) + size
                if self.sizes[part] > GIT_CAP:
                    self.drop(part, f"holds over {GIT_CAP / (1 << 20):g} MiB, more than this "
                                    "check copies out (ship a shallow clone: git clone "
                                    "--depth 1 --single-branch)")
                    return None
                if path == part and posixpath.basename(path) == ".git":
                    self.gitfiles.add(path)
                dest.parent.mkdir(parents=True, exist_ok=True)
                if src is None:
                    return Sink(self, part, dest.open("wb"))
                if src.is_file():
                    shutil.copyfile(src, dest)
        except OSError as exc:
            self.drop(part, f"could not be copied out ({exc.strerror or exc})")
        return None

    def drop(self, part: str, why: str) -> None:
        """Give up the repository at image path `part`: its copy is removed, `why` kept."""
        self.unreadable.setdefault(part, why)
        local = self.tree / member_path(part)
        if local.is_dir() and not local.is_symlink():
            shutil.rmtree(local, ignore_errors=True)
        elif local.exists():
            local.unlink(missing_ok=True)

    def repositories(self) -> list[str]:
        """The image paths of the repositories copied whole (folders with a HEAD and an
        objects/, either possibly a symlink), each made safe to read: its config written
        afresh, its alternates pointed at the copies (once: call it when the copy is done)."""
        if self._found is not None:
            return self._found
        found = []
        for here, dirs, files in os.walk(self.tree):
            rel = Path(here).relative_to(self.tree).as_posix()
            image = "/" if rel == "." else "/" + rel
            part = repo_part(image)
            linked = {name for name in ("HEAD", "objects")
                      if posixpath.join(image, name) in self.links}
            try:
                if Path(here).name == "info" and Path(here).parent.name == "objects" \
                        and "alternates" in files:
                    self._alternates(Path(here) / "alternates", image)
                if {"HEAD", "objects"} <= set(files) | set(dirs) | linked:
                    self._config(Path(here))
                    found.append(image)
            except OSError as exc:
                self.drop(part or image, f"could not be prepared for git ({exc.strerror or exc})")
        found = [r for r in found if repo_part(r) not in self.unreadable]
        self._found = sorted(found)
        return self._found

    def _alternates(self, path: Path, info: str) -> None:
        """Point each alternate (an image path, absolute or relative to objects/) at its
        copy: it never leaves the copy, and a quoted entry is dropped."""
        objects = posixpath.dirname(info)
        lines = [f"{self.tree / member_path(posixpath.join(objects, ln))}\n"
                 for ln in path.read_text(errors="replace").splitlines()
                 if ln and not ln.startswith(("#", '"'))]
        path.write_text("".join(lines))

    @staticmethod
    def _config(repo: Path) -> None:
        config = repo / "config"
        fmt = object_format(config) if config.is_file() else None
        config.write_text(f"[core]\n\trepositoryformatversion = {1 if fmt else 0}\n" +
                          (f"[extensions]\n\tobjectformat = {fmt}\n" if fmt else ""))


def _git(git: str, copy: GitCopy, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv, env = git_command(git, repo, copy.home, *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=GIT_TIMEOUT, env=env,
                          cwd=copy.home)


def _objects_hold(git: str, copy: GitCopy, repo: Path, needle: bytes) -> bool:
    """Whether any object of the repository (reachable or not, loose or packed), as git
    inflates it, holds `needle`; CannotCheck past OBJECTS_CAP bytes or GIT_TIMEOUT seconds."""
    argv, env = git_command(git, repo, copy.home, "cat-file", "--batch-all-objects", "--batch")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd=copy.home)
    assert proc.stdout is not None
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(GIT_TIMEOUT, expire)
    timer.start()
    search, read = Needle(needle), 0
    try:
        while chunk := proc.stdout.read(CHUNK):
            if search.feed(chunk):
                return True
            read += len(chunk)
            if read > OBJECTS_CAP:
                raise CannotCheck(f"its objects inflate to over {OBJECTS_CAP / (1 << 20):g} "
                                  "MiB, more than this check reads")
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
    if expired.is_set():
        raise CannotCheck(f"git took over {GIT_TIMEOUT} s to read its objects")
    return False


def _cannot(where: Path, image_path: str, why: str, cwd: str) -> Finding:
    return Finding(where, None, "integrity-git",
                   f"{image_path} in the work image {why}: what it holds beyond HEAD cannot "
                   "be checked; ship a plain repository with only HEAD's history, or none",
                   severity(image_path, cwd))


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """What a failed git command said last (its final stderr line)."""
    return (proc.stderr.strip().splitlines() or ["no output"])[-1]


def _present(git: str, copy: GitCopy, repo: Path, ids: list[str]) -> list[str]:
    """Which of `ids` are objects of the repository (loose, packed or through an alternate,
    reachable or not): asked of git by id, so the cost is that of the ids, not the
    repository's size."""
    if not ids:
        return []
    argv, env = git_command(git, repo, copy.home, "cat-file", "--batch-check")
    proc = subprocess.run(argv, input="".join(f"{i}\n" for i in ids), capture_output=True,
                          text=True, timeout=GIT_TIMEOUT, env=env, cwd=copy.home)
    if proc.returncode != 0:
        raise CannotCheck(f"git cannot look its objects up ({_last_line(proc)[:200]})")
    return [line.split()[0] for line in proc.stdout.splitlines()
            if line.split()[1:2] == ["blob"]]


def repo_findings(git: str, copy: GitCopy, image_path: str, task: Task,
                  canary: bytes | None, hidden: dict[str, Path] | None = None
                  ) -> list[Finding]:
    """What one repository of the work image holds beyond HEAD, and any hidden file in any
    of its objects (`hidden`: git blob id → the task's file; errors where the workspace sees
    it, warnings elsewhere in the image)."""
    where = task.dir / "environment" / "Dockerfile"
    cwd = posixpath.normpath(task.environment.cwd)
    level = severity(image_path, cwd)
    repo = copy.tree / member_path(image_path)
    if (repo / "commondir").exists():
        return [_cannot(where, image_path, "names another repository's folder (commondir), "
                        "which this check does not follow", cwd)]
    try:
        head = _git(git, copy, repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        has_head = head.returncode == 0
        ahead = _git(git, copy, repo, "rev-list", "--all", "--reflog",
                     *(["--not", "HEAD"] if has_head else []))
        fsck = _git(git, copy, repo, "fsck", "--unreachable", "--no-reflogs", "--no-progress")
        failed = next((p for p in (ahead, fsck) if p.returncode != 0), None)
        if failed is not None:
            why = _last_line(failed)
            links = [p for p in copy.links if inside(p, image_path)]
            if links:
                why += f"; symlinks inside it are not followed ({sorted(links)[0]})"
            return [_cannot(where, image_path, "is a git repository this machine's git cannot "
                            f"read ({why[:200]})", cwd)]
        holds = bool(canary) and _objects_hold(git, copy, repo, canary or b"")
        width = 64 if object_format(repo / "config") == "sha256" else 40
        leaked = sorted(_present(git, copy, repo, [i for i in hidden or {} if len(i) == width]))
    except subprocess.TimeoutExpired:
        return [_cannot(where, image_path, f"took git over {GIT_TIMEOUT} s to read", cwd)]
    except (OSError, subprocess.SubprocessError) as exc:
        return [_cannot(where, image_path, f"could not be read by git ({exc})", cwd)]
    except CannotCheck as exc:
        return [_cannot(where, image_path, str(exc), cwd)]
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
                           "--prune=now)", level))
    for blob in leaked:
        out.append(Finding(hidden[blob] if hidden else where, None, "integrity-leak",
                           f"this file's content is a git object of {image_path} in the work "
                           f"image (git cat-file -p {blob[:12]} prints it; the history HEAD "
                           "reaches counts too): ship the workspace's history without it "
                           "(a fresh repository, or git filter-repo)", level))
    if holds:
        out.append(Finding(where, None, "integrity-canary",
                           f"the canary string is in a git object of {image_path} in "
                           f"{task.id}'s work image: a hidden file was committed there",
                           level))
    return out


def git_findings(copy: GitCopy, task: Task, canary: bytes | None,
                 hidden: dict[str, Path] | None = None) -> list[Finding]:
    """The findings of every repository of the work image (`hidden`: git blob id → the
    task's hidden file, sought in every object): those copied, read with git;
    those not copied whole, and gitfiles (`.git` naming a folder elsewhere), as repositories
    that cannot be checked."""
    where = task.dir / "environment" / "Dockerfile"
    cwd = posixpath.normpath(task.environment.cwd)
    out = [_cannot(where, part, why, cwd) for part, why in sorted(copy.unreadable.items())]
    for path in sorted(copy.gitfiles - copy.unreadable.keys()):
        with (copy.tree / member_path(path)).open("rb") as fh:
            first = fh.readline(4096).decode(errors="replace").strip()
        if first.startswith("gitdir:"):
            out.append(_cannot(where, path, f"is a gitfile ({first[:200]}) naming a folder "
                               "this check does not copy", cwd))
    repos = copy.repositories()
    if not repos:
        return out
    git = shutil.which("git")
    if git is None:
        return out + [Finding(where, None, "integrity-git", f"{repos[0]} is a git repository in "
                              "the work image and git is not installed here to inspect it",
                              "warning")]
    return out + [f for repo in repos
                  for f in repo_findings(git, copy, repo, task, canary, hidden)]
