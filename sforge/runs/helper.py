"""The in-container helper: one static binary (`sforge-submit`, and `relay`) that sforge
mounts into work containers, so it needs nothing of the image (busybox, debian-slim).

Built from helper/ (Go, standard library only, CGO_ENABLED=0) by scripts/setup.sh with
Debian's golang-go; built here on first use when Go is present and the binary is missing
or older than its sources. The sources are package data (a wheel carries them): the binary
is built into their build/ folder, or, where the package cannot be written to, into the
user's cache under a digest of the sources.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sforge.core.config import package_data
from sforge.core.errors import SforgeError
from sforge.core.fileio import user_cache

SOURCE = package_data("helper")
ENV = "SFORGE_HELPER"  # a prebuilt binary elsewhere


def _sources() -> list[Path]:
    return [*sorted(SOURCE.glob("*.go")), SOURCE / "go.mod"]


def _binary_path() -> Path:
    if os.access(SOURCE, os.W_OK) or os.access(SOURCE / "build", os.W_OK):
        return SOURCE / "build" / "sforge-helper"
    digest = hashlib.blake2b(digest_size=8)
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return user_cache(f"helper-{digest.hexdigest()}") / "sforge-helper"


def _stale(binary: Path) -> bool:
    if not binary.is_file():
        return True
    built = binary.stat().st_mtime_ns
    return any(p.stat().st_mtime_ns > built for p in _sources())


def build_helper(out: Path | None = None) -> Path:
    """Build the static helper with Go into `out` (atomically); SforgeError without Go."""
    out = out or _binary_path()
    go = shutil.which("go")
    if go is None:
        raise SforgeError("the sforge-submit helper is not built and Go is missing: run "
                          "scripts/setup.sh (it installs Debian's golang-go and builds it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath",
           "GOCACHE": os.environ.get("GOCACHE", str(Path.home() / ".cache" / "go-build"))}
    # each build writes into a folder of its own (threads of one process and processes on
    # other nodes share a pid space only in part), then replaces `out` atomically
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        built = Path(tmp) / out.name
        proc = subprocess.run([go, "build", "-ldflags", "-s -w", "-o", str(built), "."],
                              cwd=SOURCE, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SforgeError(f"building the helper in {SOURCE} failed:\n"
                              f"{proc.stderr.strip()}")
        built.replace(out)
    return out


def helper_binary() -> Path:
    """Path of the static helper binary (mount it as /usr/local/bin/sforge-submit or call
    it with `relay LISTEN UNIX_SOCKET`)."""
    if os.environ.get(ENV):
        path = Path(os.environ[ENV])
        if not path.is_file():
            raise SforgeError(f"{ENV}={path}: no such file")
        return path
    if not SOURCE.is_dir():
        raise SforgeError(f"{SOURCE}: the helper's sources are missing (a broken install)")
    binary = _binary_path()
    if _stale(binary):
        return build_helper(binary)
    return binary


if __name__ == "__main__":
    print(helper_binary())
    subprocess.run([str(helper_binary()), "--help"], check=False)
