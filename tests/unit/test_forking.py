"""sforge.core.forking: work shared out to forked workers comes back in order, and a worker that
dies is an error, never a wait without end."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sforge.core import forking
from sforge.core.errors import SforgeError

pytestmark = pytest.mark.skipif(forking.usable_cores() < 2, reason="needs two cores")


@pytest.fixture(autouse=True)
def no_other_threads(monkeypatch):  # type: ignore[no-untyped-def]
    # Earlier tests of this pytest process leave idle threads behind (fork_map stays serial).
    monkeypatch.setattr(forking, "threading", SimpleNamespace(active_count=lambda: 1))


def test_answers_in_order_from_workers():
    parent = os.getpid()
    got = forking.fork_map(lambda i: (i * i, os.getpid()), list(range(20)), 1)
    assert [a for a, _ in got] == [i * i for i in range(20)]
    assert {pid for _, pid in got} - {parent}


def test_a_map_nested_in_a_workers_job_runs_there_serially():
    """A cold report's table workers read result folders with a fork_map of their own: in a
    worker it must run in that worker (no forks of forks) and leave the worker's job as it
    was for its next items (it was cleared: an AssertionError on the next item)."""
    def one(i: int) -> tuple[int, int, set[int]]:
        inner = forking.fork_map(lambda j: (j + i, os.getpid()), list(range(60)), 1)
        assert [a for a, _ in inner] == [j + i for j in range(60)]
        return i, os.getpid(), {pid for _, pid in inner}

    got = forking.fork_map(one, list(range(12)), 1)
    assert [i for i, _, _ in got] == list(range(12))
    for _, worker, inner_pids in got:
        assert worker != os.getpid() and inner_pids == {worker}


def test_an_exception_in_a_worker_is_raised_here():
    def one(i: int) -> int:
        if i == 5:
            raise SforgeError("item 5 is broken")
        return i

    with pytest.raises(SforgeError, match="item 5 is broken"):
        forking.fork_map(one, list(range(10)), 1)


def test_a_killed_worker_is_an_error_not_a_hang():
    def one(i: int) -> int:
        if i == 3:
            os.kill(os.getpid(), 9)
        return i

    with pytest.raises(SforgeError, match="worker process died"):
        forking.fork_map(one, list(range(8)), 1)


def test_submissions_listed_in_workers_are_the_serial_ones(tmp_path, monkeypatch):
    """discover_rows shares task folders out to workers: the same rows in the same order
    as a serial listing, and each worker saves the hashes of its folders (the next
    listing reads no archive)."""
    import json

    from sforge.benchmark import hashing, submissions

    root = tmp_path / "submissions"
    for s in range(3):
        for t in range(4):
            folder = root / f"src{s}" / f"task{t}"
            folder.mkdir(parents=True)
            for i in range(3):
                (folder / f"a{i}.tar.gz").write_bytes(f"{s}{t}{i}".encode())
            (folder / "a1.json").write_text(json.dumps({"elapsed_s": 60.0 + s, "agent": "x"}))
    (root / "src0" / "task0" / ".hidden.tar").write_bytes(b"no")
    monkeypatch.setattr(hashing.HashCache, "RACY_NS", -1)

    def listed(per: int, cache: Path) -> list[submissions.RecordRow]:
        monkeypatch.setattr(submissions, "FOLDERS_PER_PROCESS", per)
        return submissions.discover_rows([root], hashing.FolderHashCache(cache),
                                         result_of=lambda task, sha: f"{task}/{sha[:8]}")

    serial = listed(10**6, tmp_path / "serial")
    pids = tmp_path / "pids"
    pids.mkdir()
    real = submissions._folder_rows

    def rows(*a):  # type: ignore[no-untyped-def]
        (pids / str(os.getpid())).touch()
        return real(*a)

    monkeypatch.setattr(submissions, "_folder_rows", rows)
    parallel = listed(1, tmp_path / "parallel")
    assert {int(p.name) for p in pids.iterdir()} - {os.getpid()}
    assert parallel == serial and len(serial) == 36
    assert [f.archive for f in serial] == sorted(f.archive for f in serial)
    assert [(f.name, f.elapsed_s, f.agent) for f in serial[:3]] == [
        ("a0", None, None), ("a1", 60.0, "x"), ("a2", None, None)]
    assert all(f.result == f"{f.task}/{f.sha256[:8]}" for f in serial)

    def unread(path):  # type: ignore[no-untyped-def]
        raise AssertionError(f"{path} read again")

    monkeypatch.setattr(hashing, "file_sha256", unread)
    assert listed(10**6, tmp_path / "parallel") == serial


def test_an_archive_removed_while_listed_is_left_out(tmp_path, monkeypatch):
    from sforge.benchmark import hashing, submissions

    folder = tmp_path / "submissions" / "src" / "task"
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"a{i}.tar").write_bytes(b"x%d" % i)
    real = submissions.split_archive_name

    def name(filename: str):  # type: ignore[no-untyped-def]
        if filename == "a1.tar":  # listed, then gone before its stat
            (folder / filename).unlink(missing_ok=True)
        return real(filename)

    monkeypatch.setattr(submissions, "split_archive_name", name)
    rows = submissions.discover_rows([tmp_path / "submissions"],
                                     hashing.FolderHashCache(tmp_path / "cache"))
    assert [r.name for r in rows] == ["a0", "a2"]
