"""Blobs: data kept out of git, fetched by sha256 and verified before anything is built.

A fetch goes to a temporary file beside the blob, is verified, then renamed: a mismatch
leaves nothing at the blob's path, so nothing can be built from it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from sforge.benchmark.hashing import HashCache
from sforge.benchmark.model import Benchmark, Blob, Task
from sforge.core.errors import SforgeError
from sforge.core.fileio import create_temp


class BlobError(SforgeError):
    """A blob that cannot be had: unreachable everywhere, or its bytes not the declared sha256."""


def blob_urls(bench: Benchmark, env: Mapping[str, str] | None = None) -> list[str]:
    """$SFORGE_BLOB_URL first, then the benchmark's blob_url."""
    env = os.environ if env is None else env
    return [u.rstrip("/") for u in (env.get("SFORGE_BLOB_URL"), bench.blob_url) if u]


def _download(url: str, dest: Path) -> str:
    """Copy `url` into `dest`, returning the sha256 of what was written."""
    h = hashlib.sha256()
    parsed = urlparse(url)
    with dest.open("wb") as out:
        if parsed.scheme == "file":
            with open(unquote(parsed.path), "rb") as src:
                while chunk := src.read(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
        elif parsed.scheme in ("http", "https"):
            import requests

            with requests.get(url, stream=True, timeout=60) as resp:
                resp.raise_for_status()
                for chunk in resp.iter_content(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
        else:
            raise BlobError(f"unsupported blob URL scheme in {url!r} (use http(s):// or file://)")
    return h.hexdigest()


def fetch_blob(bench: Benchmark, task: Task, blob: Blob) -> Path:
    """Download a missing blob from the first URL that has it."""
    import requests

    target = task.dir / blob.path
    urls = blob_urls(bench)
    if not urls:
        raise BlobError(f"task {task.id}: blob {blob.path} is missing and no blob URL is set "
                        "(set SFORGE_BLOB_URL or blob_url in benchmark.toml)")
    target.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for base in urls:
        url = f"{base}/{blob.sha256}"
        fd, tmp = create_temp(target.parent, prefix=f".{target.name}.", suffix=".part")
        os.close(fd)
        try:
            actual = _download(url, tmp)
        except (OSError, requests.RequestException) as exc:
            tmp.unlink(missing_ok=True)
            failures.append(f"{url}: {exc}")
            continue
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if actual != blob.sha256:
            tmp.unlink(missing_ok=True)
            raise BlobError(f"task {task.id}: blob {blob.path} from {url} has sha256 {actual}, "
                            f"expected {blob.sha256}; nothing was kept")
        os.replace(tmp, target)
        return target
    raise BlobError(f"task {task.id}: cannot fetch blob {blob.path} "
                    f"(sha256 {blob.sha256}):\n  " + "\n  ".join(failures))


def ensure_blob(bench: Benchmark, task: Task, blob: Blob, cache: HashCache) -> Path:
    """The verified blob file, fetched first when missing."""
    target = task.dir / blob.path
    if not target.is_file():
        return fetch_blob(bench, task, blob)
    actual = cache.sha256(target)
    if actual != blob.sha256:
        raise BlobError(f"task {task.id}: blob {blob.path} has sha256 {actual}, expected "
                        f"{blob.sha256} (delete it to fetch it again, or fix [[blobs]] in "
                        f"{task.toml_path})")
    return target


