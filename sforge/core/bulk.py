"""Bulk phases: building 100,000 records, rows or views without the cyclic GC.

Those objects are acyclic tuples, lists and small dataclasses; while they pile up, the
collector would rescan the growing heap again and again (a third of listing 100,000
submissions, 0.6–0.9 s of 5 s of aggregation, measured). Only the bookkeeping runs under
this, never grading or serving, so a long-running process keeps its collector."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic GC off for the block, back on after it (if it was on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
