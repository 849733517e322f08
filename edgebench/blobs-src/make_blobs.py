#!/usr/bin/python3
"""Build EdgeBench's blobs from their sources in git, byte for byte reproducibly.

Every directory blobs-src/<task_id>/<name>/ becomes the tarball <name>.tar.gz that task
<task_id> declares in its task.toml ([[blobs]] path = ".../<name>.tar.gz", sha256 = ...).
Each tarball is written to <outdir>/<sha256>, the layout sforge downloads from
($SFORGE_BLOB_URL/<sha256>), so a local build is served with

    python3 edgebench/blobs-src/make_blobs.py
    SFORGE_BLOB_URL=file://$PWD/edgebench/blobs-src/dist sforge build --task log_triage

--install also copies each tarball to its declared path in the task directory (gitignored),
which is all an offline build needs. The script exits non-zero when a tarball's sha256
differs from the declared one, or a source has no declared blob: after changing a source,
put the printed sha256 into task.toml and bump the task version.

Reproducible: entries sorted by path, mtime fixed, uid/gid 0, modes normalised, gzip
header without name and with mtime 0. The gzip stream itself comes from the local zlib;
stock zlib (Debian, Ubuntu, macOS, CPython's bundled zlib) gives identical bytes, but a
zlib fork (zlib-ng) may not: then `sforge build` fetches the published blob instead.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
import tarfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASKS = HERE.parent / "tasks"
MTIME = 946684800  # 2000-01-01T00:00:00Z
SKIP = {"__pycache__", ".DS_Store"}


def deterministic_tar_gz(src: Path) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src.rglob("*"), key=lambda p: p.relative_to(src).as_posix()):
            rel = path.relative_to(src)
            if SKIP & set(rel.parts) or path.is_symlink():
                continue
            info = tarfile.TarInfo(rel.as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size = path.stat().st_size
            info.mode = 0o755 if path.stat().st_mode & 0o100 else 0o644
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def declared(task_id: str, name: str) -> tuple[str, str] | None:
    """(path, sha256) of the task's blob named <name>.tar.gz, if declared."""
    toml = TASKS / task_id / "task.toml"
    if not toml.is_file():
        return None
    for blob in tomllib.loads(toml.read_text()).get("blobs", []):
        if Path(blob.get("path", "")).name == f"{name}.tar.gz":
            return blob["path"], blob.get("sha256", "")
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "dist",
                    help="where to write <sha256> files (default: blobs-src/dist)")
    ap.add_argument("--install", action="store_true",
                    help="also copy each tarball to its declared path in the task directory")
    args = ap.parse_args()
    problems = 0
    for src in sorted(p for p in HERE.glob("*/*") if p.is_dir() and p.parent.name != "dist"):
        task_id, name = src.parent.name, src.name
        if name in SKIP:
            continue
        data = deterministic_tar_gz(src)
        sha = hashlib.sha256(data).hexdigest()
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / sha
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        decl = declared(task_id, name)
        if decl is None:
            problems += 1
            print(f"{task_id}: {name}.tar.gz {sha}  NOT DECLARED in tasks/{task_id}/task.toml")
            continue
        path, want = decl
        status = "ok" if want == sha else f"MISMATCH: task.toml says {want}"
        problems += want != sha
        print(f"{task_id}: {path} {sha} ({len(data)} bytes) {status}")
        if args.install and want == sha:
            dest = TASKS / task_id / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
