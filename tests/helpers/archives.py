"""Submission archives built in tests: a gzip tar of the given text files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def archive(path: Path, files: dict[str, str]) -> Path:
    """Write `files` (name → text) as a .tar.gz at `path` (its folders made); returns path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
