"""Docker-style resource strings, parsed once so every caller agrees on their meaning."""

from __future__ import annotations

import re

_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_FACTORS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_memory(text: str) -> int:
    """'16g' → bytes. Raises ValueError with the expected form."""
    m = _MEMORY.match(str(text))
    if not m:
        raise ValueError(f"expected a size like '512m' or '16g', got {text!r}")
    value = int(float(m.group(1)) * _FACTORS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"expected a positive size, got {text!r}")
    return value


def memory_mb(text: str) -> int:
    """A memory string in whole MiB, at least 1."""
    return max(1, parse_memory(text) // (1 << 20))
