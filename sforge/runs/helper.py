"""The in-container helper: one static binary (`sforge-submit`, and `relay`) that sforge
mounts into work containers, so it needs nothing of the image (busybox, debian-slim).

Built from helper/ (Go, standard library only, CGO_ENABLED=0) by scripts/setup.sh with
Debian's golang-go; built here on first use when Go is present and the binary is missing
or older than its sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sforge.core.config import REPO_ROOT
from sforge.core.errors import SforgeError

SOURCE = REPO_ROOT / "helper"
BINARY = SOURCE / "build" / "sforge-helper"
ENV = "SFORGE_HELPER"  # a prebuilt binary elsewhere


def _stale(binary: Path) -> bool:
    if not binary.is_file():
        return True
    built = binary.stat().st_mtime_ns
    return any(p.stat().st_mtime_ns > built for p in SOURCE.glob("*.go")) or \
        (SOURCE / "go.mod").stat().st_mtime_ns > built


def build_helper(out: Path = BINARY) -> Path:
    go = shutil.which("go")
    if go is None:
        raise SforgeError("the sforge-submit helper is not built and Go is missing: run "
                          "scripts/setup.sh (it installs Debian's golang-go and builds it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath",
           "GOCACHE": os.environ.get("GOCACHE", str(Path.home() / ".cache" / "go-build"))}
    proc = subprocess.run([go, "build", "-ldflags", "-s -w", "-o", str(tmp), "."],
                          cwd=SOURCE, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SforgeError(f"building the helper in {SOURCE} failed:\n{proc.stderr.strip()}")
    tmp.replace(out)
    return out


def helper_binary() -> Path:
    """Path of the static helper binary (mount it as /usr/local/bin/sforge-submit or call
    it with `relay LISTEN UNIX_SOCKET`)."""
    if os.environ.get(ENV):
        path = Path(os.environ[ENV])
        if not path.is_file():
            raise SforgeError(f"{ENV}={path}: no such file")
        return path
    if SOURCE.is_dir() and _stale(BINARY):
        return build_helper()
    if not BINARY.is_file():
        raise SforgeError(f"{BINARY}: the helper is not built (run scripts/setup.sh)")
    return BINARY


if __name__ == "__main__":
    print(helper_binary())
    subprocess.run([str(helper_binary()), "--help"], check=False)
