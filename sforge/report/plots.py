"""The report's plots: inline SVG written directly, with a hover tooltip per mark.

SVG so the page can say what each point is: every bar and every submission's point carries
an SVG `<title>` (the browser shows it on hover: raw score, submission, time), no script
needed, and text stays text, sharp at any size. The figures are four simple kinds (bars,
lines with points, step curves with points, boxes with points), so they are drawn here as
SVG elements rather than through a plotting library: matplotlib cost a second to import and
a quarter of a second per figure, which made a report of 200 tasks take minutes; this takes
milliseconds, and the same tables always give the same bytes.

Each figure is self-contained for inlining in HTML: no XML prolog, no namespace URL, no ids
(so several figures share a page safely), all text escaped. Coordinates are in a viewBox of
WIDTH units; the page scales the figure to its width.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape

import numpy as np
import pandas as pd

from sforge.benchmark.model import Task

MAX_POINTS = 400  # points per source in a task plot; the box and the curve use them all
BOX_MIN_POINTS = 5  # fewer valid scores of a source are drawn as points alone: no box
WIDTH = 480  # viewBox units; pages scale it to at most 560 px (and down to a phone's width)
FONT = 14  # tick labels one smaller: at 400 px wide (a 380 px figure) still ≥ 10 px
INK, GRID, MUTED = "#222222", "#e3e3e3", "#777777"
CHAR = 0.62  # a generous average glyph width of sans-serif text, in font sizes (label room)
EDGE = 2.0  # the least room between a label and the figure's edge


def _label(text: object, width: int = 24) -> str:
    """A source name as a plot label: printable, at most `width` characters."""
    label = "".join(c if c.isprintable() else " " for c in str(text))
    return label[: width - 1] + "…" if len(label) > width else label


def _n(x: float) -> str:
    """A coordinate: two decimals at most, no trailing zeros."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# --------------------------------------------------------------------------- axes
def nice_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 × 10^k, at most `most`."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        lo, hi = lo - (abs(lo) or 1.0) * 0.5, hi + (abs(hi) or 1.0) * 0.5
    raw = (hi - lo) / max(1, most - 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks, i = [], 0
    while first + i * step <= hi + step * 1e-9:
        ticks.append(first + i * step)
        i += 1
    while len(ticks) < 2 or ticks[-1] < hi - step * 1e-9:
        ticks.append(ticks[-1] + step)
    return ticks


def tick_text(value: float, step: float) -> str:
    """A tick value with as many decimals as its step needs (an exponent when large)."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(step) < 1e-4:
        return f"{value:.3g}"
    decimals = next(d for d in range(12) if abs(round(step, d) - step) <= 1e-9 * abs(step))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


# The largest magnitude an axis spans: a grader may write 1e308, and a span between two
# such values is no longer a float. A value beyond is drawn at the axis' end (its tooltip
# says what it is).
AXIS_LIMIT = 1e300


def fitted_range(lo: float, hi: float, pad: float = 0.0) -> tuple[float, float]:
    """An axis' ends for data from lo to hi: the data's own range widened by `pad` of its
    span each side (a single value: ±5 % of it, or ±0.5 at 0), within ±AXIS_LIMIT. Not
    stretched to round ticks: data 41–43 is not drawn on an axis from 0 to 50."""
    lo, hi = (min(max(v, -AXIS_LIMIT), AXIS_LIMIT) if math.isfinite(v) else 0.0
              for v in (lo, hi))
    if hi > lo:
        span = hi - lo
        return lo - pad * span, hi + pad * span
    half = abs(hi) * 0.05 or 0.5
    return lo - half, hi + half


class Axis:
    """A linear map from data to viewBox units, with its ticks. Nothing is drawn outside
    the axis: a value beyond its ends (only ever one beyond AXIS_LIMIT) sits at the end.
    Without `ticks`, the axis spans fitted_range and its ticks are the round values
    within it."""

    def __init__(self, lo: float, hi: float, start: float, end: float, pad: float = 0.0,
                 ticks: Sequence[float] | None = None):
        if ticks is None:
            lo, hi = fitted_range(lo, hi, pad)
            ticks = nice_ticks(lo, hi)
        self.lo, self.hi, self.start, self.end = lo, hi, start, end
        self._least, self._most = min(lo, hi), max(lo, hi)  # (a reversed axis: hi < lo)
        self.ticks = [t for t in ticks if lo - 1e-9 * abs(hi - lo) <= t <= hi + 1e-9 * abs(hi - lo)]

    def __call__(self, value: float) -> float:
        value = min(max(value, self._least), self._most) if value == value else self._least
        return self.start + (value - self.lo) / (self.hi - self.lo) * (self.end - self.start)

    def labels(self) -> list[tuple[float, str]]:
        """(position value, label) of each tick, labels as precise as the tick step needs."""
        step = self.ticks[1] - self.ticks[0] if len(self.ticks) > 1 else 1.0
        return [(t, tick_text(t, step)) for t in self.ticks]


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = FONT - 1,
          extra: str = "") -> str:
    return (f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size}" text-anchor="{anchor}"'
            f'{extra}>{escape(text)}</text>')


def _text_width(text: str, size: int = FONT - 1) -> float:
    """The room a label takes, estimated generously (CHAR)."""
    return CHAR * size * len(text)


def _xtick(x: float, y: float, text: str) -> str:
    """An x tick label centred under its tick, moved in from the figure's edge when it
    would stick out (it ends at the edge then)."""
    half = _text_width(text) / 2
    if x + half > WIDTH - EDGE:
        return _text(WIDTH - EDGE, y, text, "end")
    if x - half < EDGE:
        return _text(EDGE, y, text, "start")
    return _text(x, y, text, "middle")


def _svg(width: float, height: float, body: Iterable[str]) -> str:
    return (f'<svg viewBox="0 0 {_n(width)} {_n(height)}" class="plot" role="img" '
            f'font-family="sans-serif" fill="{INK}">' + "".join(body) + "</svg>")


def _frame(x: Axis, y: Axis, xlabel: str, ylabel: str | None, xgrid: bool = True,
           ygrid: bool = True, yticks: bool = True) -> list[str]:
    """Grid, frame, tick labels and axis labels of a plot area."""
    top, bottom, left, right = y.end, y.start, x.start, x.end
    out = []
    if xgrid:
        out += [f'<line x1="{_n(x(t))}" y1="{_n(top)}" x2="{_n(x(t))}" y2="{_n(bottom)}" '
                f'stroke="{GRID}"/>' for t in x.ticks]
    if ygrid and yticks:
        out += [f'<line x1="{_n(left)}" y1="{_n(y(t))}" x2="{_n(right)}" y2="{_n(y(t))}" '
                f'stroke="{GRID}"/>' for t in y.ticks]
    out.append(f'<rect x="{_n(left)}" y="{_n(top)}" width="{_n(right - left)}" '
               f'height="{_n(bottom - top)}" fill="none" stroke="{MUTED}"/>')
    out += [_xtick(x(t), bottom + FONT + 3, s) for t, s in x.labels()]
    if yticks:
        out += [_text(left - 5, y(t) + FONT * 0.35, s, "end") for t, s in y.labels()]
    out.append(_text((left + right) / 2, bottom + 2 * FONT + 9, xlabel, "middle", FONT))
    if ylabel:
        cy = (top + bottom) / 2
        out.append(_text(YLABEL_X, cy, ylabel, "middle", FONT,
                         f' transform="rotate(-90 {YLABEL_X} {_n(cy)})"'))
    return out


YLABEL_X = FONT  # the rotated y axis label's baseline; tick labels stay right of it


def _tick_room(labels: Iterable[str], size: int = FONT - 1) -> float:
    return max((_text_width(s, size) for s in labels), default=3 * CHAR * size) + 10


def _left_of(y: Axis) -> float:
    """The plot area's left edge for a y axis with a rotated label: room for its widest
    tick label (ticks at 5 units left of the edge) right of that label."""
    return YLABEL_X + 8 + _tick_room(s for _, s in y.labels())


def _legend(entries: Sequence[tuple[str, str]], y0: float) -> tuple[list[str], float]:
    """Swatch-and-name entries in rows under the plot; → (elements, height used)."""
    out: list[str] = []
    x, y = 10.0, y0
    for label, color in entries:
        w = 22 + _text_width(label) + 14
        if x + w > WIDTH - 5 and x > 10:
            x, y = 10.0, y + FONT + 6
        out.append(f'<rect x="{_n(x)}" y="{_n(y - FONT + 3)}" width="14" height="8" '
                   f'style="fill: {color}"/>')
        out.append(_text(x + 19, y, label))
        x += w
    return out, (y - y0 + FONT + 8) if entries else 0.0


def _mark(shape: str, tip: str) -> str:
    """A mark with its tooltip (the browser shows an SVG title on hover)."""
    return f"<{shape}><title>{escape(tip)}</title></{shape.split(' ', 1)[0]}>"


# --------------------------------------------------------------------------- tooltips
def _num(x: object, digits: int = 6) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{float(x):.{digits}g}"  # type: ignore[arg-type]


def hours_text(seconds: float) -> str:
    """Agent seconds as hours: two decimals, three digits and an exponent when that would
    be more than a line (a bad clock can say 1e308 s)."""
    hours = seconds / 3600
    return f"{hours:.2f}" if abs(hours) < 1e9 else f"{hours:.3g}"


def submission_tip(row: dict) -> str:
    """What hovering over a submission's point says: who, which archive, the numbers, when."""
    lines = [f"{row['source']} · {row['name']}",
             f"raw {_num(row['score'])} · rescaled {_num(row.get('rescaled'), 4)}"]
    when = []
    if row.get("elapsed_s") is not None and not pd.isna(row.get("elapsed_s")):
        when.append(f"at {hours_text(row['elapsed_s'])} h agent time")
    if row.get("graded_at"):
        when.append(f"graded {str(row['graded_at'])[:19].replace('T', ' ')}")
    if when:
        lines.append(" · ".join(when))
    return "\n".join(lines)


class TaskPoints:
    """One task's rows of scores.csv as plain columns for its two plots, each row's tooltip
    made once for both: pandas operations per source cost more than the drawing."""

    COLUMNS = ("source", "name", "score", "rescaled", "elapsed_s", "graded_at")

    def __init__(self, rows: pd.DataFrame):
        self.cols = {c: rows[c].tolist() for c in self.COLUMNS}
        score = rows["score"].to_numpy(dtype="float64", na_value=np.nan)
        self.elapsed = rows["elapsed_s"].to_numpy(dtype="float64", na_value=np.nan).tolist()
        # Valid rows with a finite raw score, in row order.
        self.scored: list[int] = np.flatnonzero(
            rows["valid"].to_numpy(dtype=bool) & np.isfinite(score)).tolist()
        self.score = score.tolist()
        self._tips: dict[int, str] = {}

    def tip(self, i: int) -> str:
        """The tooltip of row `i`, made on first use and then reused by both plots."""
        tip = self._tips.get(i)
        if tip is None:
            tip = self._tips[i] = submission_tip({c: v[i] for c, v in self.cols.items()})
        return tip


# --------------------------------------------------------------------------- figures
def leaderboard_svg(board: pd.DataFrame, colors: dict[str, str]) -> str | None:
    """One bar per source, best first, on a 0–100 axis."""
    if board.empty:
        return None
    labels = [_label(s) for s in board["source"]]
    left = _tick_room(labels) + 6
    row = 24
    height = 12 + row * len(board) + 2 * FONT + 20
    x = Axis(0, 100, left, WIDTH - 12, ticks=[0, 20, 40, 60, 80, 100])
    top = 10.0
    bottom = top + row * len(board)
    y = Axis(0, len(board), bottom, top, ticks=[])
    out = _frame(x, y, "mean rescaled best (0–100)", None, ygrid=False, yticks=False)
    for i, (rec, label) in enumerate(zip(board.to_dict("records"), labels, strict=True)):
        score = rec["score"] if rec["score"] is not None and not pd.isna(rec["score"]) else 0.0
        cy = top + row * (i + 0.5)
        tip = (f"{rec['source']}: {_num(rec['score'], 4)} "
               f"({rec['tasks_valid']} of {rec['tasks']} tasks valid)")
        out.append(_mark(f'rect x="{_n(x(0))}" y="{_n(cy - row * 0.4)}" '
                         f'width="{_n(x(max(0.0, min(100.0, score))) - x(0))}" '
                         f'height="{_n(row * 0.8)}" '
                         f'style="fill: {colors.get(rec["source"], "#333333")}"', tip))
        out.append(_text(left - 6, cy + FONT * 0.35, label, "end"))
    return _svg(WIDTH, height, out)


def budgets_svg(budgets: pd.DataFrame, colors: dict[str, str]) -> str | None:
    """Per source, the mean score within each agent-time budget: a line with a point each."""
    if budgets.empty:
        return None
    hours = budgets["budget_h"].to_numpy(dtype="float64")
    y = Axis(0, 100, 12 + 200, 12, ticks=[0, 20, 40, 60, 80, 100])
    x = Axis(float(hours.min()), float(hours.max()), _left_of(y), WIDTH - 12, pad=0.03)
    out = _frame(x, y, "agent time budget (hours)", "mean score")
    legend = []
    for source, rows in budgets.groupby("source", sort=True):
        color = colors.get(str(source), "#333333")
        pts = [(x(h), y(s if not pd.isna(s) else 0.0))
               for h, s in zip(rows["budget_h"], rows["score"], strict=True)]
        out.append(f'<polyline points="{" ".join(f"{_n(a)},{_n(b)}" for a, b in pts)}" '
                   f'style="fill: none; stroke: {color}; stroke-width: 1.5"/>')
        for (px, py), h, s in zip(pts, rows["budget_h"], rows["score"], strict=True):
            out.append(_mark(f'circle cx="{_n(px)}" cy="{_n(py)}" r="3.5" '
                             f'style="fill: {color}"', f"{source}: {_num(s, 4)} within {h:g} h"))
        legend.append((_label(source), color))
    items, used = _legend(legend, 212 + 2 * FONT + 30)
    return _svg(WIDTH, 212 + 2 * FONT + 22 + used, out + items)


def _sample(rows: list[int], keep: list[bool] | None = None) -> list[int]:
    """At most MAX_POINTS of one source's rows (fixed seed: same tables, same picture),
    always including those flagged in `keep`: the flagged first, then the sample."""
    if len(rows) <= MAX_POINTS:
        return rows
    flags = keep if keep is not None else [False] * len(rows)
    must = [r for r, k in zip(rows, flags, strict=True) if k]
    rest = [r for r, k in zip(rows, flags, strict=True) if not k]
    take = max(0, MAX_POINTS - len(must))
    return must + pd.Series(rest).sample(min(take, len(rest)), random_state=0).tolist()


def _finite_range(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    return (min(finite), max(finite)) if finite else (0.0, 1.0)


def _points(rows: pd.DataFrame | TaskPoints) -> TaskPoints:
    return rows if isinstance(rows, TaskPoints) else TaskPoints(rows)


def task_time_svg(task: Task, rows: pd.DataFrame | TaskPoints, colors: dict[str, str]
                  ) -> str | None:
    """Best so far over agent time per source (a step line), every valid timed submission
    as a point with its tooltip (a sample of MAX_POINTS per source, always with the points
    where the best improved). Rescaled when the task has a rescale table, else raw."""
    pts = _points(rows)
    source, score, elapsed = pts.cols["source"], pts.score, pts.elapsed
    timed = sorted((i for i in pts.scored if math.isfinite(elapsed[i])),
                   key=lambda i: (source[i], elapsed[i]))
    if not timed:
        return None
    rescaled = task.score.rescale is not None
    y_of = [v if isinstance(v, float) else math.nan for v in pts.cols["rescaled"]] \
        if rescaled else score
    better = min if task.score.direction == "minimize" else max
    if rescaled:
        y = Axis(-3, 103, 12 + 190, 12, ticks=[0, 20, 40, 60, 80, 100])
    else:
        lo, hi = _finite_range([y_of[i] for i in timed])
        y = Axis(lo, hi, 12 + 190, 12, pad=0.05)
    x = Axis(0.0, max(elapsed[i] for i in timed) / 3600 or 1.0, _left_of(y), WIDTH - 12,
             pad=0.03)
    out = _frame(x, y, "agent time (hours)", "rescaled (0–100)" if rescaled else "raw score")
    legend = []
    parts: dict[str, list[int]] = {}
    for i in timed:  # contiguous per source, sources in sorted order
        parts.setdefault(source[i], []).append(i)
    for name, part in parts.items():
        color = colors.get(str(name), "#333333")
        best: list[float] = []
        for i in part:
            best.append(score[i] if not best else better(best[-1], score[i]))
        first: dict[float, float] = {}  # a score's rescaled value, as its first row has it
        for i in part:
            first.setdefault(score[i], y_of[i])
        curve = [first[b] for b in best] if rescaled else best
        steps: list[str] = []
        prev = None
        for i, v in zip(part, curve, strict=True):
            v = 0.0 if math.isnan(v) else v
            h = elapsed[i] / 3600
            if prev is not None:
                steps.append(f"{_n(x(h))},{_n(y(prev))}")
            steps.append(f"{_n(x(h))},{_n(y(v))}")
            prev = v
        steps.append(f"{_n(x.end)},{_n(y(prev if prev is not None else 0.0))}")
        out.append(f'<polyline points="{" ".join(steps)}" '
                   f'style="fill: none; stroke: {color}; stroke-width: 1.4"/>')
        improved = [k == 0 or best[k] != best[k - 1] for k in range(len(best))]
        for i in _sample(part, improved):
            yy = 0.0 if math.isnan(y_of[i]) else y_of[i]
            out.append(_mark(f'circle cx="{_n(x(elapsed[i] / 3600))}" cy="{_n(y(yy))}" '
                             f'r="2.6" style="fill: {color}; fill-opacity: 0.6"', pts.tip(i)))
        legend.append((_label(name), color))
    items, used = _legend(legend, 202 + 2 * FONT + 30)
    return _svg(WIDTH, 202 + 2 * FONT + 22 + used, out + items)


def _box(values: np.ndarray) -> tuple[float, float, float, float, float]:
    """(low whisker, q1, median, q3, high whisker): whiskers at the furthest values within
    1.5 IQR of the quartiles (linear-interpolated quartiles, as numpy computes them), of
    the values as the axis shows them (within ±AXIS_LIMIT, where differences stay floats)."""
    values = np.clip(values, -AXIS_LIMIT, AXIS_LIMIT)
    q1, med, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    iqr = q3 - q1
    low = float(values[values >= q1 - 1.5 * iqr].min())
    high = float(values[values <= q3 + 1.5 * iqr].max())
    return low, q1, med, q3, high


def _box_marks(x: Axis, cy: float, row: float, values: np.ndarray) -> str:
    """A box plot of `values` on the row centred at cy (_box's whiskers)."""
    low, q1, med, q3, high = (x(v) for v in _box(values))
    h = row * 0.25
    return (f'<g style="fill: none; stroke: {MUTED}">'
            f'<rect x="{_n(q1)}" y="{_n(cy - h)}" width="{_n(q3 - q1)}" height="{_n(2 * h)}"/>'
            f'<path d="M{_n(low)} {_n(cy)}H{_n(q1)}M{_n(q3)} {_n(cy)}H{_n(high)}'
            f'M{_n(low)} {_n(cy - h / 2)}V{_n(cy + h / 2)}'
            f'M{_n(high)} {_n(cy - h / 2)}V{_n(cy + h / 2)}"/></g>'
            f'<path d="M{_n(med)} {_n(cy - h)}V{_n(cy + h)}" '
            f'style="fill: none; stroke: {INK}; stroke-width: 1.5"/>')


def task_distribution_svg(task: Task, rows: pd.DataFrame | TaskPoints,
                          colors: dict[str, str]) -> str | None:
    """Valid raw scores per source: a box over all of them (from BOX_MIN_POINTS scores on;
    fewer are points alone), a jittered point per submission (at most MAX_POINTS per
    source) with its tooltip. The axis spans the scores' own range, padded."""
    pts = _points(rows)
    if not pts.scored:
        return None
    score = pts.score
    mine: dict[str, list[int]] = {}
    for i in pts.scored:
        mine.setdefault(pts.cols["source"][i], []).append(i)
    sources = sorted(mine)
    labels = [_label(s) for s in sources]
    left = _tick_room(labels) + 6
    row = 30
    top = 10.0
    bottom = top + row * len(sources)
    lo, hi = _finite_range([score[i] for i in pts.scored])
    x = Axis(lo, hi, left, WIDTH - 12, pad=0.05)
    y = Axis(0, len(sources), bottom, top, ticks=[])
    better = "lower" if task.score.direction == "minimize" else "higher"
    out = _frame(x, y, f"valid raw score ({better} is better)", None, yticks=False)
    rng = np.random.default_rng(0)
    for i, (source, label) in enumerate(zip(sources, labels, strict=True)):
        cy = top + row * (i + 0.5)
        if len(mine[source]) >= BOX_MIN_POINTS:
            out.append(_box_marks(x, cy, row, np.array([score[k] for k in mine[source]],
                                                       dtype="float64")))
        shown = _sample(mine[source])
        jitter = rng.uniform(-0.3, 0.3, len(shown)) * row
        color = colors.get(source, "#333333")
        for k, dy in zip(shown, jitter.tolist(), strict=True):
            out.append(_mark(f'circle cx="{_n(x(score[k]))}" cy="{_n(cy + dy)}" r="2.4" '
                             f'style="fill: {color}; fill-opacity: 0.55"', pts.tip(k)))
        out.append(_text(left - 6, cy + FONT * 0.35, label, "end"))
    return _svg(WIDTH, bottom + 2 * FONT + 20, out)
