"""Unit: products are created with the umask's mode (0666 & ~umask), as `open()` would, so
a shared server or a web server can read tables, reports, results, blobs and archives."""

from __future__ import annotations

import hashlib
import io
import os
import stat
from pathlib import Path

import pytest

from sforge.benchmark.blobs import ensure_blob
from sforge.benchmark.hashing import HashCache
from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.submissions import store_archive
from sforge.core.fileio import atomic_write_bytes, atomic_write_json, atomic_write_text


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writes_respect_umask(tmp_path, umask):
    for i, write in enumerate((lambda p: atomic_write_bytes(p, b"x"),
                               lambda p: atomic_write_text(p, "x"),
                               lambda p: atomic_write_json(p, {"x": 1}))):
        path = tmp_path / "sub" / f"f{i}"
        write(path)
        assert mode(path) == 0o666 & ~umask, oct(mode(path))
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["f0", "f1", "f2"]


def test_failed_write_leaves_nothing(tmp_path):

    with pytest.raises(TypeError):
        atomic_write_bytes(tmp_path / "f", object())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_stored_archive_respects_umask(tmp_path, umask):
    sub = store_archive(tmp_path / "store", "manual", "t1", io.BytesIO(b"\x1f\x8bdata"),
                        "2026-01-01T00:00:00+00:00")
    assert mode(sub.path) == 0o666 & ~umask
    assert mode(sub.path.with_name(f"{sub.sha256}.json")) == 0o666 & ~umask
    assert [p.name for p in sub.path.parent.iterdir() if p.name.startswith(".")] == []


def test_fetched_blob_respects_umask(tmp_path, umask, monkeypatch):
    monkeypatch.delenv("SFORGE_BLOB_URL", raising=False)
    data = b"blob\n"
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / sha).write_bytes(data)
    root = tmp_path / "bench"
    for sub in ("environment", "judge"):
        (root / "tasks" / "t1" / sub).mkdir(parents=True)
        (root / "tasks" / "t1" / sub / "Dockerfile").write_text("FROM busybox:1.36\n")
    url = (tmp_path / "store").as_uri()
    (root / "benchmark.toml").write_text(f'name = "bb"\nblob_url = "{url}"\n')
    (root / "tasks" / "t1" / "task.toml").write_text(
        f'id = "t1"\n\n[judge]\ncmd = "true"\n\n[[blobs]]\npath = "judge/b.bin"\n'
        f'sha256 = "{sha}"\n')
    bench = load_benchmark(root)
    task = bench.tasks["t1"]
    path = ensure_blob(bench, task, task.blobs[0], HashCache())
    assert mode(path) == 0o666 & ~umask


@pytest.mark.parametrize("chunk", [1, 7, 100, 5000])
def test_head_tail_keeps_both_ends_and_says_what_was_cut(chunk):
    import io

    from sforge.core.fileio import HeadTail

    data = bytes(range(256)) * 40  # 10,240 bytes
    out = io.BytesIO()
    writer = HeadTail(out, head=1000, tail=500)
    for i in range(0, len(data), chunk):
        writer.write(data[i:i + chunk])
    writer.end()
    cut = len(data) - 1500
    assert out.getvalue() == (data[:1000] + f"\n[sforge] … {cut} bytes cut …\n".encode()
                              + data[-500:])


def test_head_tail_short_output_is_whole():
    import io

    from sforge.core.fileio import HeadTail

    out = io.BytesIO()
    writer = HeadTail(out, head=1000, tail=500)
    writer.write(b"x" * 1200)
    writer.end()
    assert out.getvalue() == b"x" * 1200


def test_json_nested_too_deeply_is_a_value_error():
    from sforge.core.fileio import loads_json

    assert loads_json(b'{"a": NaN}')["a"] != 0  # json's reading where orjson refuses
    with pytest.raises(ValueError, match="too deeply"):
        loads_json(b"[" * 100_000)


def test_exclusive_makes_a_second_holder_wait_and_says_so(tmp_path):
    import subprocess
    import sys
    import time

    from sforge.core.fileio import exclusive

    lock = tmp_path / "sub" / "tables.lock"
    code = ("import sys, pathlib; from sforge.core.fileio import exclusive\n"
            "with exclusive(pathlib.Path(sys.argv[1]), lambda: print('busy', flush=True)):\n"
            "    print('held', flush=True)\n")
    with exclusive(lock):
        other = subprocess.Popen([sys.executable, "-c", code, str(lock)], text=True,
                                 stdout=subprocess.PIPE)
        assert other.stdout is not None
        assert other.stdout.readline() == "busy\n"
        time.sleep(0.3)
        assert other.poll() is None  # still waiting
    assert other.stdout.readline() == "held\n" and other.wait(10) == 0


def test_exclusive_goes_on_unlocked_where_no_lock_can_be_had(tmp_path, monkeypatch, caplog):
    """A read-only tree (nothing to write there either) or a filesystem without locks: the
    block runs, with a warning, rather than stop a report that has nothing to write."""
    import errno
    import fcntl

    from sforge.core.fileio import exclusive

    (tmp_path / "file").write_text("")
    ran = []
    with exclusive(tmp_path / "file" / "tables.lock"):  # its folder cannot be made
        ran.append("no folder")

    def no_locks(*args):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with exclusive(tmp_path / "tables.lock"):
        ran.append("no locks")
    assert ran == ["no folder", "no locks"]
    assert "cannot open the lock" in caplog.text and "cannot lock" in caplog.text
