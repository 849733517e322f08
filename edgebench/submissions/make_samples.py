#!/usr/bin/python3
"""Build the sample submission archives from their sources, deterministically.

    src/<source>/<task_id>/<name>/...    the files, as they would sit in the task's cwd
    src/<source>/<task_id>/<name>.json   optional sidecar (submitted_at, elapsed_s, agent, model)
  → <source>/<task_id>/<name>.tar.gz     what `tar -czf <name>.tar.gz -C <name> .` would hold
  → <source>/<task_id>/<name>.json       the sidecar, copied

The archives are byte-for-byte reproducible (sorted entries, fixed mtime, uid/gid 0,
normalised modes, gzip mtime 0), so rerunning this script on unchanged sources changes
nothing in git. Usage: python3 make_samples.py [--check]
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
MTIME = 946684800  # 2000-01-01T00:00:00Z
SKIP = {"__pycache__", ".pytest_cache", ".DS_Store"}


def _info(name: str, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size = path.stat().st_size
        info.mode = 0o755 if path.stat().st_mode & 0o100 else 0o644
    return info


def deterministic_tar_gz(src: Path) -> bytes:
    """The archive `tar -czf - -C src .` would make, minus everything that varies."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(".", src))
        for path in sorted(src.rglob("*"), key=lambda p: p.relative_to(src).as_posix()):
            rel = path.relative_to(src)
            if SKIP & set(rel.parts) or path.suffix == ".pyc" or path.is_symlink():
                continue
            info = _info(f"./{rel.as_posix()}", path)
            if info.isdir():
                tar.addfile(info)
            else:
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def samples() -> list[tuple[Path, Path]]:
    """(source dir, archive path) for every sample under src/."""
    found = []
    for src in sorted(SRC.glob("*/*/*")):
        if src.is_dir():
            rel = src.relative_to(SRC)
            found.append((src, HERE / rel.parent / f"{rel.name}.tar.gz"))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="only verify the committed archives are up to date")
    args = ap.parse_args()
    stale = 0
    for src, archive in samples():
        data = deterministic_tar_gz(src)
        sidecar = src.with_suffix(".json")
        wanted = {archive: data}
        if sidecar.is_file():
            wanted[archive.with_suffix("").with_suffix(".json")] = sidecar.read_bytes()
        for path, content in wanted.items():
            if path.is_file() and path.read_bytes() == content:
                continue
            stale += 1
            if args.check:
                print(f"stale: {path.relative_to(HERE)}")
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            print(f"wrote {path.relative_to(HERE)}")
    if args.check and stale:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
