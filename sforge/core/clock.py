"""The one clock: UTC timestamps as ISO 8601 text, as results, sentinels and sidecars keep them."""

from __future__ import annotations

import datetime as dt


def now_iso(timespec: str = "seconds") -> str:
    """Now in UTC, e.g. 2026-01-31T12:00:00+00:00 (timespec as datetime.isoformat)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec=timespec)
