"""sforge: a benchmark harness for AI-agent tasks.

`from sforge import rescale` gives a callable: `rescale(table, raw)` is the 0–100 score of
a raw score (docs/rescale.md). It is the `sforge.rescale` module itself, made callable, rather than
the function re-exported under the module's name: a plain `from .rescale import rescale`
here would replace the attribute `sforge.rescale` with the function, and then every
`from . import rescale` (sforge/loader.py) would get the function instead of the module and
fail on `.validate`. Both uses work this way; `sforge.rescale.rescale` is the plain function.
"""

from __future__ import annotations

import types

from . import rescale as _rescale_module

__version__ = "0.1.0"  # also the package version (pyproject reads it): no metadata lookup


class _CallableModule(types.ModuleType):
    """The rescale module, callable as its own `rescale(table, raw)`."""

    def __call__(self, table, raw):  # type: ignore[no-untyped-def]
        return self.rescale(table, raw)


_rescale_module.__class__ = _CallableModule
rescale = _rescale_module



def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """`from sforge import load_results` without making every `sforge` command import pandas."""
    if name in ("load_results", "Results"):
        from . import frames

        return getattr(frames, name)
    raise AttributeError(f"module 'sforge' has no attribute {name!r}")


__all__ = ["Results", "__version__", "load_results", "rescale"]
