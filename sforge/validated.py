"""Documents that passed their schema before, remembered by digest (schema and content).

jsonschema costs a tenth of a second to import, a third of a no-op `sforge build`; the same
config.yaml and benchmark.toml are checked on every command. A document seen valid with the
same schema text is not checked again; anything new or changed is. The memory only ever
saves time: a digest is added after the schema passed, and a lost or unwritable file means
everything is checked again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

KEEP = 128  # digests remembered (the newest)


def _file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sforge" / "validated.json"


def _known() -> list[str]:
    try:
        data = json.loads(_file().read_text())
    except (OSError, ValueError):
        return []
    return [d for d in data if isinstance(d, str)] if isinstance(data, list) else []


def digest(schema_text: str, document: Any) -> str | None:
    """The memory's key for `document` under this schema; None when it is not plain data."""
    try:
        text = json.dumps(document, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(f"{schema_text}\0{text}".encode()).hexdigest()


def seen(key: str | None) -> bool:
    return key is not None and key in _known()


def remember(key: str | None) -> None:
    if key is None:
        return
    from .fileio import atomic_write_text

    known = [k for k in _known() if k != key]
    with contextlib.suppress(OSError):  # a read-only home: checked every time, as before
        atomic_write_text(_file(), json.dumps([*known, key][-KEEP:]))
