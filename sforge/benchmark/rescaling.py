"""Raw score → 0–100, exactly as the benchmark's published numbers were computed.

A task's `[score].rescale` table names a `kind` and its parameters; `rescale(table, raw)`
is the score. The twelve kinds and their formulas are listed in `KINDS` (each with its
formula as text: `help(sforge.rescale)` prints them) and in docs/rescale.md. `validate`
runs when a benchmark is loaded, so a bad table is a task-definition error and never a
silent 0 at grading time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Params = Mapping[str, float]


def _clip(x: float, lo: float = 0.0, hi: float = 100.0) -> float:
    return min(hi, max(lo, x))


def _linear(r: float, p: Params) -> float:
    lo, up = p["lower"], p["upper"]
    return _clip(100 * (r - lo) / (up - lo))


def _min_linear(r: float, p: Params) -> float:
    b, e = p["baseline"], p["expert"]
    return _clip(100 * (b - r) / (b - e))


def _min_linear_positive(r: float, p: Params) -> float:
    b, e = p["baseline"], p["expert"]
    if r <= 0 or b == e:
        return 0.0
    return _clip(100 * (b - r) / (b - e))


def _min_inverse_anchor(r: float, p: Params) -> float:
    a, k = p["anchor_raw"], p["anchor_score"]
    if r <= 0 or a <= 0:
        return 0.0
    return _clip(k * a / r)


def _compression_ratio_cropped_guarded(r: float, p: Params) -> float:
    b, e = p["baseline"], p["expert"]
    if r < 0.05 or b == e:
        return 0.0
    return _clip(100 * (b - r) / (b - e))


def _log_anchor(r: float, p: Params) -> float:
    a, k = p["anchor_raw"], p["anchor_score"]
    if r <= 1 or a <= 1:
        return 0.0
    return _clip(k * math.log(r) / math.log(a))


def _log_max(r: float, p: Params) -> float:
    b, e = p["baseline"], p["expert"]
    if r <= 0 or b <= 0 or e <= 0 or b == e:
        return 0.0
    return _clip(100 * math.log(r / b) / math.log(e / b))


def _log1p_max(r: float, p: Params) -> float:
    b, u = p["baseline"], p["upper"]
    if r <= 0 or b <= 0 or u <= 0:
        return 0.0
    return _clip(100 * math.log1p(r / b) / math.log1p(u / b))


def _log_min(r: float, p: Params) -> float:
    b, e = p["baseline"], p["expert"]
    if r <= 0 or b <= 0 or e <= 0 or b == e:
        return 0.0
    return _clip(100 * math.log(b / r) / math.log(b / e))


def _anchors(p: Params) -> tuple[float, float, float, float]:
    return p["baseline"], p["rank30"], p["rank1"], p["super_anchor"]


def _piecewise_max(r: float, p: Params) -> float:
    b, r30, r1, s = _anchors(p)
    if r <= b:
        return 0.0
    if r <= r30:
        return _clip(20 * (r - b) / (r30 - b), 0, 20)
    if r <= r1:
        return _clip(20 + 60 * (r - r30) / (r1 - r30), 20, 80)
    if r <= s:
        return _clip(80 + 20 * (r - r1) / (s - r1), 80, 100)
    return 100.0


def _piecewise_min(r: float, p: Params) -> float:
    b, r30, r1, s = _anchors(p)
    if r <= 0 or r >= b:
        return 0.0
    if r >= r30:
        return _clip(20 * (b - r) / (b - r30), 0, 20)
    if r >= r1:
        return _clip(20 + 60 * (r30 - r) / (r30 - r1), 20, 80)
    if r >= s:
        return _clip(80 + 20 * (r1 - r) / (r1 - s), 80, 100)
    return 100.0


def _piecewise_log_min(r: float, p: Params) -> float:
    b, r30, r1, s = _anchors(p)
    if r <= 0 or min(b, r30, r1, s) <= 0 or r >= b:
        return 0.0
    if r >= r30:
        return _clip(20 * math.log(b / r) / math.log(b / r30), 0, 20)
    if r >= r1:
        return _clip(20 + 60 * math.log(r30 / r) / math.log(r30 / r1), 20, 80)
    if r >= s:
        return _clip(80 + 20 * math.log(r1 / r) / math.log(r1 / s), 80, 100)
    return 100.0


@dataclass(frozen=True)
class Kind:
    """One rescale kind: its parameters, formula, formula in words and degenerate cases."""
    params: tuple[str, ...]
    formula: Callable[[float, Params], float]
    doc: str  # the formula in words, for help() and docs/rescale.md
    # Parameter sets whose formula would divide by zero: load-time errors.
    degenerate: Callable[[Params], str | None] = lambda p: None


def _equal(a: str, b: str) -> Callable[[Params], str | None]:
    return lambda p: f"{a} equals {b} ({p[a]})" if p[a] == p[b] else None


def _piecewise_degenerate(p: Params) -> str | None:
    names = ("baseline", "rank30", "rank1", "super_anchor")
    for x, y in zip(names, names[1:], strict=False):
        if p[x] == p[y]:
            return f"{x} equals {y} ({p[x]}): a zero-width segment"
    return None


def _log1p_degenerate(p: Params) -> str | None:
    b, u = p["baseline"], p["upper"]
    if b > 0 and u > 0 and math.log1p(u / b) == 0:
        return "ln(1 + upper/baseline) is 0"
    return None


_PIECES = ("baseline → 0, rank30 → 20, rank1 → 80, super_anchor → 100, {how} between "
           "anchors (each segment clipped to its band)")

KINDS: dict[str, Kind] = {
    "linear": Kind(("lower", "upper"), _linear,
                   "clip(100·(r − lower)/(upper − lower)); higher raw is better",
                   _equal("lower", "upper")),
    "min_linear": Kind(("baseline", "expert"), _min_linear,
                       "clip(100·(baseline − r)/(baseline − expert)); lower raw is better",
                       _equal("baseline", "expert")),
    "min_linear_positive": Kind(
        ("baseline", "expert"), _min_linear_positive,
        "0 if r ≤ 0 or baseline = expert, else clip(100·(baseline − r)/(baseline − expert))"),
    "min_inverse_anchor": Kind(
        ("anchor_raw", "anchor_score"), _min_inverse_anchor,
        "0 if r ≤ 0 or anchor_raw ≤ 0, else clip(anchor_score·anchor_raw/r)"),
    "compression_ratio_cropped_guarded": Kind(
        ("baseline", "expert"), _compression_ratio_cropped_guarded,
        "0 if r < 0.05 or baseline = expert, else "
        "clip(100·(baseline − r)/(baseline − expert))"),
    "log_anchor": Kind(
        ("anchor_raw", "anchor_score"), _log_anchor,
        "0 if r ≤ 1 or anchor_raw ≤ 1, else clip(anchor_score·ln r / ln anchor_raw)"),
    "log_max": Kind(
        ("baseline", "expert"), _log_max,
        "0 if r, baseline or expert ≤ 0 or baseline = expert, else "
        "clip(100·ln(r/baseline)/ln(expert/baseline)); higher raw is better"),
    "log1p_max": Kind(
        ("baseline", "upper"), _log1p_max,
        "0 if r, baseline or upper ≤ 0, else "
        "clip(100·ln(1 + r/baseline)/ln(1 + upper/baseline))", _log1p_degenerate),
    "log_min": Kind(
        ("baseline", "expert"), _log_min,
        "0 if r, baseline or expert ≤ 0 or baseline = expert, else "
        "clip(100·ln(baseline/r)/ln(baseline/expert)); lower raw is better"),
    "piecewise_max": Kind(
        ("baseline", "rank30", "rank1", "super_anchor"), _piecewise_max,
        "0 if r ≤ baseline, 100 above super_anchor; " + _PIECES.format(how="linear")
        + "; higher raw is better, negative raws allowed", _piecewise_degenerate),
    "piecewise_min": Kind(
        ("baseline", "rank30", "rank1", "super_anchor"), _piecewise_min,
        "0 if r ≤ 0 or r ≥ baseline, 100 for 0 < r < super_anchor; "
        + _PIECES.format(how="linear") + "; lower raw is better", _piecewise_degenerate),
    "piecewise_log_min": Kind(
        ("baseline", "rank30", "rank1", "super_anchor"), _piecewise_log_min,
        "0 if r ≤ 0, any anchor ≤ 0 or r ≥ baseline, 100 below super_anchor; "
        + _PIECES.format(how="linear in ln r") + "; lower raw is better",
        _piecewise_degenerate),
}


class RescaleError(ValueError):
    """A rescale table that cannot produce scores: unknown kind, missing or bad parameter."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def validate(table: Mapping[str, object]) -> None:
    """Raise RescaleError naming the kind and parameter when `table` cannot be used."""
    kind_name = table.get("kind")
    if kind_name not in KINDS:
        known = ", ".join(sorted(KINDS))
        raise RescaleError(f"unknown kind {kind_name!r}; expected one of: {known}", "kind")
    kind = KINDS[str(kind_name)]
    for name in kind.params:
        if name not in table:
            raise RescaleError(f"kind {kind_name!r} needs parameter {name!r}", name)
        value = table[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RescaleError(
                f"kind {kind_name!r}: parameter {name!r} must be a number, got {value!r}", name
            )
        if not math.isfinite(value):
            raise RescaleError(f"kind {kind_name!r}: parameter {name!r} must be finite", name)
    extra = sorted(set(table) - set(kind.params) - {"kind"})
    if extra:
        raise RescaleError(f"kind {kind_name!r} takes no parameter {extra[0]!r}", extra[0])
    problem = kind.degenerate({n: float(table[n]) for n in kind.params})  # type: ignore[arg-type]
    if problem:
        raise RescaleError(f"kind {kind_name!r}: degenerate parameters: {problem}")


def rescale(table: Mapping[str, object] | None, raw: float | None) -> float | None:
    """The 0–100 score of `raw` under a task's `[score].rescale` table, or None.

    None (never 0) when there is no table or no raw score, or the raw score is not a
    finite number: an invalid or missing result has no rescaled score. A table with an
    unknown kind, a missing or non-numeric parameter, or degenerate parameters raises
    RescaleError (the loader reports it as a task-definition error).

    >>> rescale({"kind": "linear", "lower": 0, "upper": 10}, 2.5)
    25.0

    clip(x) clamps x to [0, 100]. The kinds (parameters: formula):
    {kinds}
    """
    if table is None or raw is None:
        return None
    try:
        r = float(raw)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(r):
        return None
    validate(table)
    kind = KINDS[str(table["kind"])]
    return float(kind.formula(r, {n: float(table[n]) for n in kind.params}))  # type: ignore[arg-type]


def kinds_text(indent: str = "") -> str:
    """One line per kind: name(parameters): formula."""
    return "\n".join(f"{indent}- {name}({', '.join(k.params)}): {k.doc}"
                     for name, k in KINDS.items())


rescale.__doc__ = (rescale.__doc__ or "").replace("    {kinds}", kinds_text("    "))
