"""sforge: a benchmark harness for AI-agent tasks.

`from sforge import rescale` is the function `rescale(table, raw)`: the 0–100 score of a
raw score under a task's rescale table (help(rescale) lists the twelve kinds; the formulas
live in sforge.benchmark.rescaling). `from sforge import load_results` gives a results folder as
pandas DataFrames; it is imported on first use, so `import sforge` stays light.
"""

from __future__ import annotations

from sforge.benchmark.rescaling import rescale

__version__ = "0.1.0"  # also the package version (pyproject reads it): no metadata lookup


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """`from sforge import load_results` without making every `sforge` command import pandas."""
    if name in ("load_results", "Results"):
        from sforge.scores import frames  # start-up: pandas only when asked for

        return getattr(frames, name)
    raise AttributeError(f"module 'sforge' has no attribute {name!r}")


__all__ = ["Results", "__version__", "load_results", "rescale"]
