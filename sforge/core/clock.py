"""The one clock: UTC timestamps as ISO 8601 text, as results, sentinels, sidecars, run records
and the service's state keep them."""

from __future__ import annotations

import datetime as dt


def now_iso(timespec: str = "seconds", ts: float | None = None) -> str:
    """Now (or the epoch seconds `ts`) in UTC, e.g. 2026-01-31T12:00:00+00:00, to `timespec`
    as datetime.isoformat takes it ("seconds", "milliseconds", "auto", ...)."""
    moment = dt.datetime.now(dt.UTC) if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC)
    return moment.isoformat(timespec=timespec)
