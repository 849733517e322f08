"""The integrity check's scan of a work image's files and git repositories
(sforge.check.leaks, sforge.check.git_leaks), on images exported by hand: no Docker."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import pytest

from sforge.benchmark.model import SubmissionRules
from sforge.check import git_leaks
from sforge.check.probes import Workspace
from tests.helpers.git_images import (
    CANARY,
    file,
    fixture_task,
    folder,
    git,
    image,
    link,
    make_repo,
    scan,
)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
RUN_SH = Path(__file__).parents[1] / "fixtures/integrity/clean/tasks/t/judge/run.sh"


def _cannot(found: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    return sorted((severity, message.split(" ")[0]) for rule, severity, message in found
                  if rule == "integrity-git" and "cannot be checked" in message)


@needs_git
def test_the_image_git_config_runs_nothing_on_this_host(tmp_path):
    """A repository's config and a .gitconfig beside it are the image's code: git reads
    neither, so a core.fsmonitor (or any other command they name) never runs here."""
    ws = make_repo(tmp_path / "ws")
    marks = [tmp_path / f"PWNED{i}" for i in range(3)]
    with (ws / ".git" / "config").open("a") as out:
        out.write(f"[core]\n\tfsmonitor = touch {marks[0]}\n")
    (ws / ".git" / ".gitconfig").write_text(f"[core]\n\tfsmonitor = touch {marks[1]}\n")
    (ws / ".gitconfig").write_text(f"[core]\n\tfsmonitor = touch {marks[2]}\n")
    found = scan(tmp_path, image((ws, "home/workspace/t")), canary=CANARY)
    assert found == []
    assert not any(m.exists() for m in marks)


@needs_git
@pytest.mark.parametrize("form", ["absolute", "relative"])
def test_alternates_never_reach_a_repository_of_this_host(tmp_path, form):
    host = make_repo(tmp_path / "host", f"the answer {CANARY}\n")
    ws = make_repo(tmp_path / "ws")
    target = (host / ".git" / "objects").as_posix()
    line = ("/.." * 12 + target) if form == "absolute" else ("../" * 20 + target.lstrip("/"))
    (ws / ".git" / "objects" / "info" / "alternates").write_text(line + "\n")
    found = scan(tmp_path, image((ws, "home/workspace/t")), canary=CANARY)
    assert [r for r, _, _ in found if r == "integrity-canary"] == []


@needs_git
def test_git_named_files_and_folders_are_still_scanned(tmp_path):
    """Folders named like repositories that are none, files named `*.git` and files inside a
    `.git` are hashed and searched for the canary like any file."""
    judge = RUN_SH.read_bytes()
    raw = image(members=(
        folder("home/workspace/t/notes.git"),
        file("home/workspace/t/notes.git/runner.sh", judge),
        file("home/workspace/t/answer.git", f"x = {CANARY}\n"),
        file("opt/notes.git/hint.txt", f"x = {CANARY}\n"),
        file("home/workspace/t/.git/info/solution.txt", "the solution is 42, surely\n")))
    found = scan(tmp_path, raw, canary=CANARY)
    where = sorted((rule, next(w for w in message.split() if w.startswith("/")).rstrip(":"))
                   for rule, _, message in found)
    assert where == [("integrity-canary", "/home/workspace/t/answer.git"),
                     ("integrity-canary", "/opt/notes.git/hint.txt"),
                     ("integrity-leak", "/home/workspace/t/notes.git/runner.sh"),
                     ("integrity-solution", "/home/workspace/t/.git/info/solution.txt")], found


@needs_git
def test_a_git_this_check_cannot_follow_cannot_be_checked(tmp_path):
    """A `.git` symlink, a gitfile and a symlinked objects/ point git at what the copy does
    not hold: each is a finding, an error when the workspace sees it."""
    raw = image(members=(
        link("home/workspace/t/.git", "/srv/meta"),
        file("opt/a/.git", "gitdir: /srv/meta\n"),
        folder("opt/b/.git"), file("opt/b/.git/HEAD", "ref: refs/heads/main\n"),
        folder("opt/b/.git/refs"), link("opt/b/.git/objects", "/srv/objects")))
    assert _cannot(scan(tmp_path, raw)) == [("error", "/home/workspace/t/.git"),
                                            ("warning", "/opt/a/.git"),
                                            ("warning", "/opt/b/.git")]
    gitfile = image(members=(file("home/workspace/t/.git", "gitdir: /srv/meta\n"),))
    assert _cannot(scan(tmp_path, gitfile)) == [("error", "/home/workspace/t/.git")]


@needs_git
def test_a_repository_above_cwd_is_an_error(tmp_path):
    """git in cwd finds a repository of a folder above it: the agent reads it."""
    repo = make_repo(tmp_path / "w")
    git(repo, "branch", "solution")
    git(repo, "commit", "-q", "--allow-empty", "-m", "later")
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    (repo / "t").mkdir()
    [(rule, severity, message)] = scan(tmp_path, image((repo, "home/workspace")))
    assert (rule, severity) == ("integrity-git", "error"), message


@needs_git
def test_the_copy_cap_is_per_repository(tmp_path, monkeypatch):
    """A repository too big to copy cannot be checked (a warning outside the workspace); the
    others are still read."""
    monkeypatch.setattr(git_leaks, "GIT_CAP", 256 << 10)
    big = make_repo(tmp_path / "big")
    (big / "blob.bin").write_bytes(os.urandom(1 << 20))
    git(big, "add", "blob.bin")
    git(big, "commit", "-qm", "big")
    ws = make_repo(tmp_path / "ws")
    git(ws, "branch", "solution")
    git(ws, "commit", "-q", "--allow-empty", "-m", "later")
    git(ws, "reset", "-q", "--hard", "HEAD~1")
    found = scan(tmp_path, image((big, "opt/big"), (ws, "home/workspace/t")))
    assert sorted((r, s, m.split(" ")[0]) for r, s, m in found) == [
        ("integrity-git", "error", "/home/workspace/t/.git"),
        ("integrity-git", "warning", "/opt/big/.git")], found
    assert "cannot be checked" in next(m for _, s, m in found if s == "warning")


@needs_git
def test_git_failing_or_hanging_is_a_finding(tmp_path, monkeypatch):
    ws = make_repo(tmp_path / "ws")
    raw = image((ws, "home/workspace/t"))

    def hangs(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], 1)

    monkeypatch.setattr(subprocess, "run", hangs)
    assert _cannot(scan(tmp_path, raw)) == [("error", "/home/workspace/t/.git")]


@needs_git
def test_reading_objects_is_bounded(tmp_path, monkeypatch):
    """The canary search stops at a byte budget: what it did not read cannot be checked."""
    monkeypatch.setattr(git_leaks, "OBJECTS_CAP", 64)
    ws = make_repo(tmp_path / "ws", "x" * 4096 + "\n")
    found = scan(tmp_path, image((ws, "home/workspace/t")), canary=CANARY)
    assert _cannot(found) == [("error", "/home/workspace/t/.git")], found


@needs_git
def test_a_full_disk_while_copying_is_a_finding(tmp_path):
    """Copying a repository out can fail (disk full): the repository cannot be checked, the
    scan goes on."""
    ws = make_repo(tmp_path / "ws")
    (ws / "blob.bin").write_bytes(os.urandom(256 << 10))
    git(ws, "add", "blob.bin")
    git(ws, "commit", "-qm", "big")
    raw = image((ws, "home/workspace/t"))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (128 << 10, hard))
    try:
        found = scan(tmp_path, raw)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    assert _cannot(found) == [("error", "/home/workspace/t/.git")], found


@needs_git
def test_a_repository_at_the_root_is_found_with_cwd_root(tmp_path):
    repo = make_repo(tmp_path / "r")
    git(repo, "tag", "later", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "later")
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    for arcname in (".", ""):
        found = scan(tmp_path, image((repo / ".git", f"{arcname}/.git".lstrip("/"))),
                     fixture_task("/"))
        assert [(r, s, m.split(" ")[0]) for r, s, m in found] == [
            ("integrity-git", "error", "/.git")], found


def test_the_noop_workspace_keeps_dot_names():
    ws = Workspace("/", SubmissionRules(paths=(".",)))
    for name in ("./.bashrc", ".git/HEAD", "/etc/x"):
        sink = ws.take(tarfile.TarInfo(name))
        assert sink is not None
        sink.close()
    with ws.archive() as out, tarfile.open(fileobj=out) as tar:
        assert sorted(tar.getnames()) == [".bashrc", ".git/HEAD", "etc/x"]
