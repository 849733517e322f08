"""Unit: fetching and verifying blobs over file:// and a real local HTTP server (no Docker)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from pathlib import Path

import pytest

import sforge.benchmark.blobs
from sforge.benchmark.blobs import BlobError, blob_urls, ensure_blob, fetch_blob
from sforge.benchmark.hashing import HashCache
from sforge.benchmark.loader import load_benchmark

DATA = b"hidden test data\n" * 100
SHA = hashlib.sha256(DATA).hexdigest()
BLOB_PATH = "judge/blobs/hidden.tar.gz"


def make_bench(root: Path, blob_url: str | None = None) -> Path:
    (root / "tasks" / "t1" / "environment").mkdir(parents=True)
    (root / "tasks" / "t1" / "judge").mkdir()
    toml = 'name = "bb"\n' + (f'blob_url = "{blob_url}"\n' if blob_url else "")
    (root / "benchmark.toml").write_text(toml)
    (root / "tasks" / "t1" / "task.toml").write_text(
        f'id = "t1"\n\n[judge]\ncmd = "true"\n\n[[blobs]]\npath = "{BLOB_PATH}"\n'
        f'sha256 = "{SHA}"\n')
    (root / "tasks" / "t1" / "environment" / "Dockerfile").write_text("FROM busybox:1.36\n")
    (root / "tasks" / "t1" / "judge" / "Dockerfile").write_text("FROM busybox:1.36\n")
    return root


def load(root: Path):
    bench = load_benchmark(root)
    assert bench.errors == []
    task = bench.tasks["t1"]
    [blob] = task.blobs
    return bench, task, blob


def store(path: Path, files: dict[str, bytes]) -> Path:
    """A blob store: files named by sha256."""
    path.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (path / name).write_bytes(data)
    return path


def leftovers(task) -> list[Path]:
    """Anything at or beside the blob's path: the blob itself or a temporary file."""
    d = task.dir / "judge" / "blobs"
    return sorted(d.iterdir()) if d.is_dir() else []


@pytest.fixture(autouse=True)
def no_env_url(monkeypatch):
    monkeypatch.delenv("SFORGE_BLOB_URL", raising=False)


class Server:
    def __init__(self, directory: Path):
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        handler = functools.partial(Handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/blobs"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()
        self.closed = False

    def close(self):
        if not self.closed:
            self.closed = True
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(5)


@pytest.fixture
def http_store(tmp_path, monkeypatch):
    """A real HTTP server on a loopback port serving tmp_path/www; blobs under /blobs/."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    www = tmp_path / "www"
    (www / "blobs").mkdir(parents=True)
    server = Server(www)
    yield server, www / "blobs"
    server.close()


# ---------------------------------------------------------------------------- file://


def test_fetch_over_file_url(tmp_path):
    src = store(tmp_path / "store", {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench", src.as_uri()))
    path = ensure_blob(bench, task, blob, HashCache())
    assert path == task.dir / BLOB_PATH
    assert path.read_bytes() == DATA
    assert leftovers(task) == [path]  # no .part file beside it


def test_file_url_mismatch_keeps_nothing(tmp_path):
    src = store(tmp_path / "store", {SHA: b"not the declared bytes"})
    actual = hashlib.sha256(b"not the declared bytes").hexdigest()
    bench, task, blob = load(make_bench(tmp_path / "bench", src.as_uri()))
    with pytest.raises(BlobError) as info:
        ensure_blob(bench, task, blob, HashCache())
    msg = str(info.value)
    for part in ("t1", BLOB_PATH, SHA, actual):
        assert part in msg
    assert not (task.dir / BLOB_PATH).exists()
    assert leftovers(task) == []


def test_file_url_missing_at_source(tmp_path):
    src = store(tmp_path / "store", {})
    bench, task, blob = load(make_bench(tmp_path / "bench", src.as_uri()))
    with pytest.raises(BlobError) as info:
        ensure_blob(bench, task, blob, HashCache())
    msg = str(info.value)
    assert "cannot fetch blob" in msg and BLOB_PATH in msg and SHA in msg
    assert f"{src.as_uri()}/{SHA}" in msg  # says where it looked
    assert "No such file" in msg
    assert leftovers(task) == []


def test_trailing_slash_in_blob_url(tmp_path):
    src = store(tmp_path / "store", {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench", src.as_uri() + "/"))
    assert fetch_blob(bench, task, blob).read_bytes() == DATA


def test_unsupported_scheme(tmp_path):
    bench, task, blob = load(make_bench(tmp_path / "bench", "ftp://example.org/blobs"))
    with pytest.raises(BlobError, match="unsupported blob URL scheme"):
        ensure_blob(bench, task, blob, HashCache())
    assert leftovers(task) == []


# ---------------------------------------------------------------------------- http://


def test_fetch_over_http(tmp_path, http_store):
    server, root = http_store
    store(root, {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench", server.url))
    path = ensure_blob(bench, task, blob, HashCache())
    assert path.read_bytes() == DATA
    assert server.requests == [f"/blobs/{SHA}"]
    assert leftovers(task) == [path]


def test_http_mismatch_keeps_nothing(tmp_path, http_store):
    server, root = http_store
    store(root, {SHA: DATA + b"tampered"})
    actual = hashlib.sha256(DATA + b"tampered").hexdigest()
    bench, task, blob = load(make_bench(tmp_path / "bench", server.url))
    with pytest.raises(BlobError) as info:
        ensure_blob(bench, task, blob, HashCache())
    msg = str(info.value)
    for part in ("t1", BLOB_PATH, SHA, actual, server.url):
        assert part in msg
    assert leftovers(task) == []


def test_http_404(tmp_path, http_store):
    server, _ = http_store
    bench, task, blob = load(make_bench(tmp_path / "bench", server.url))
    with pytest.raises(BlobError) as info:
        ensure_blob(bench, task, blob, HashCache())
    msg = str(info.value)
    assert "cannot fetch blob" in msg and "404" in msg and f"{server.url}/{SHA}" in msg
    assert server.requests == [f"/blobs/{SHA}"]
    assert leftovers(task) == []


def test_http_server_down(tmp_path, http_store):
    server, root = http_store
    store(root, {SHA: DATA})
    url = server.url
    server.close()
    bench, task, blob = load(make_bench(tmp_path / "bench", url))
    with pytest.raises(BlobError, match="cannot fetch blob"):
        ensure_blob(bench, task, blob, HashCache())
    assert leftovers(task) == []


# ---------------------------------------------------------------------------- URLs


def test_env_url_takes_precedence(tmp_path, http_store, monkeypatch):
    server, root = http_store
    store(root, {SHA: DATA})
    # The benchmark's own blob_url holds wrong bytes: taking it would raise a mismatch.
    wrong = store(tmp_path / "wrong", {SHA: b"wrong bytes"})
    bench, task, blob = load(make_bench(tmp_path / "bench", wrong.as_uri()))
    monkeypatch.setenv("SFORGE_BLOB_URL", server.url)
    assert blob_urls(bench) == [server.url, wrong.as_uri()]
    assert ensure_blob(bench, task, blob, HashCache()).read_bytes() == DATA
    assert server.requests == [f"/blobs/{SHA}"]


def test_benchmark_url_when_env_url_lacks_the_blob(tmp_path, http_store, monkeypatch):
    server, _ = http_store  # serves nothing: 404
    good = store(tmp_path / "good", {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench", good.as_uri()))
    monkeypatch.setenv("SFORGE_BLOB_URL", server.url)
    assert ensure_blob(bench, task, blob, HashCache()).read_bytes() == DATA
    assert server.requests == [f"/blobs/{SHA}"]
    assert leftovers(task) == [task.dir / BLOB_PATH]


def test_env_url_alone(tmp_path, monkeypatch):
    src = store(tmp_path / "store", {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench"))
    monkeypatch.setenv("SFORGE_BLOB_URL", src.as_uri())
    assert ensure_blob(bench, task, blob, HashCache()).read_bytes() == DATA


def test_blob_urls_order_and_explicit_env(tmp_path):
    bench, _, _ = load(make_bench(tmp_path / "bench", "https://example.org/b/"))
    assert blob_urls(bench, {}) == ["https://example.org/b"]
    assert blob_urls(bench, {"SFORGE_BLOB_URL": "file:///m/"}) == ["file:///m",
                                                                   "https://example.org/b"]
    assert blob_urls(bench, {"SFORGE_BLOB_URL": ""}) == ["https://example.org/b"]


def test_no_url_configured(tmp_path):
    bench, task, blob = load(make_bench(tmp_path / "bench"))
    with pytest.raises(BlobError) as info:
        ensure_blob(bench, task, blob, HashCache())
    msg = str(info.value)
    assert "t1" in msg and BLOB_PATH in msg and "no blob URL is set" in msg
    assert "SFORGE_BLOB_URL" in msg and "blob_url" in msg
    assert leftovers(task) == []


# ---------------------------------------------------------------------------- present blobs


def test_present_blob_is_not_fetched(tmp_path, http_store, monkeypatch):
    server, root = http_store
    store(root, {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench", server.url))
    target = task.dir / BLOB_PATH
    target.parent.mkdir(parents=True)
    target.write_bytes(DATA)
    st = target.stat()
    monkeypatch.setattr(sforge.benchmark.blobs, "fetch_blob",
                        lambda *a: pytest.fail("a present, correct blob was fetched"))
    assert ensure_blob(bench, task, blob, HashCache()) == target
    assert server.requests == []
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)


def test_present_corrupt_blob_is_an_error(tmp_path, http_store):
    server, root = http_store
    store(root, {SHA: DATA})
    bench, task, blob = load(make_bench(tmp_path / "bench", server.url))
    target = task.dir / BLOB_PATH
    target.parent.mkdir(parents=True)
    target.write_bytes(b"corrupt")
    actual = hashlib.sha256(b"corrupt").hexdigest()
    with pytest.raises(BlobError) as info:
        ensure_blob(bench, task, blob, HashCache())
    msg = str(info.value)
    for part in ("t1", BLOB_PATH, SHA, actual, "task.toml"):
        assert part in msg
    # Not silently replaced: the user decides (delete it to fetch it again).
    assert target.read_bytes() == b"corrupt"
    assert server.requests == []
