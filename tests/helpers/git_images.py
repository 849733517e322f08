"""Git repositories and exported images made on the host, for the integrity check's git
scan (sforge.check.git_leaks) without Docker."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import Task
from sforge.check.leaks import scan_image
from tests.helpers.paths import FIXTURES

CANARY = "sforge-canary-5f1d8e2a-integrity"  # the integrity fixtures' canary
Member = tuple[tarfile.TarInfo, bytes | None]


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` (an author set) and return its stdout."""
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout


def make_repo(path: Path, text: str = "start\n") -> Path:
    """A repository at `path` with one commit of a.txt."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text(text)
    git(path, "add", "a.txt")
    git(path, "commit", "-qm", "start")
    return path


def file(name: str, data: bytes | str) -> Member:
    """A regular file member."""
    body = data.encode() if isinstance(data, str) else data
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(body), 0o644
    return info, body


def link(name: str, target: str) -> Member:
    """A symlink member."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    return info, None


def folder(name: str) -> Member:
    """A directory member."""
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, None


def image(*trees: tuple[Path, str], members: tuple[Member, ...] = ()) -> io.BytesIO:
    """An exported image: each (host folder, its path in the image), then `members`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, arcname in trees:
            tar.add(path, arcname=arcname)
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw.seek(0)
    return raw


def fixture_task(cwd: str | None = None) -> Task:
    """The clean integrity fixture's task (cwd /home/workspace/t unless `cwd`)."""
    task = load_benchmark(FIXTURES / "integrity" / "clean").tasks["t"]
    if cwd is not None:
        task = replace(task, environment=replace(task.environment, cwd=cwd))
    return task


def scan(tmp_path: Path, raw: io.BytesIO, task: Task | None = None, canary: str | None = None,
         env: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(rule, severity, message) of every finding of the leak scan of `raw`."""
    found = scan_image(raw, task or fixture_task(), canary, tmp_path / "benchmark.toml",
                       env=env)
    return [(f.rule, f.severity, f.message) for f in found]
