"""Documents that passed their schema before, remembered by digest (schema and content).

jsonschema costs a tenth of a second to import, a third of a no-op `sforge build`; the same
config.yaml and benchmark.toml are checked on every command. A document seen valid with the
same schema text is not checked again; anything new or changed is. The memory only ever
saves time: a digest is added after the schema passed, and a lost or unwritable file means
everything is checked again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sforge.core.fileio import read_strings, remember_string, user_cache

KEEP = 128  # digests remembered (the newest)


def _file() -> Path:
    return user_cache("validated.json")


def _known() -> list[str]:
    return read_strings(_file())


def digest(schema_text: str, document: Any) -> str | None:
    """The memory's key for `document` under this schema; None when it is not plain data."""
    try:
        text = json.dumps(document, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(f"{schema_text}\0{text}".encode()).hexdigest()


def seen(key: str | None) -> bool:
    """Whether a document with this key passed its schema before."""
    return key is not None and key in _known()


def remember(key: str | None) -> None:
    """Remember that a document with this key passed its schema."""
    if key is not None:  # None: not plain data. An unwritable memory means checking each time
        remember_string(_file(), key, KEEP)
