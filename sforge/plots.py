"""The report's plots: matplotlib figures as inline SVG, with a hover tooltip per point.

SVG rather than PNG so the page can say what each point is: every bar and every submission
gets an SVG `<title>` (the browser shows it on hover: raw score, submission, time) and no
script is needed. Text stays text (svg.fonttype none), so the figures are sharp and small
and stay legible when a 400 px screen scales them down. Each SVG is made self-contained
for inlining in HTML: no XML prolog, no namespace URLs, ids prefixed per figure (several
figures share one page).

Matplotlib is used through Figure objects, never pyplot: no global figure state, so a
report can be written from a Snakemake thread.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from .model import Task

MAX_POINTS = 400  # points per source in a task plot; the box and the curve use them all
WIDTH_IN = 5.6  # at 72 pt/in: 403 pt, about 540 CSS px; pages scale it down to fit
FONT = 10
# tab20, reordered so the first ten are tab10: sources keep one colour on every page
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
_SVG = "http://www.w3.org/2000/svg"
_XLINK = "http://www.w3.org/1999/xlink"
_RC: Any = {"svg.fonttype": "none", "font.size": FONT, "axes.titlesize": FONT,
       "axes.labelsize": FONT, "xtick.labelsize": FONT - 1, "ytick.labelsize": FONT - 1,
       "legend.fontsize": FONT - 1}


def source_colors(sources: Sequence[str]) -> dict[str, str]:
    """One colour per source, the same on every page and plot of a report (sorted names)."""
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sorted(set(sources)))}


def _label(text: object, width: int = 24) -> str:
    """A source name as matplotlib text: "$" would start mathtext (a malformed formula
    raises while drawing), a leading "_" hides a legend entry, long names eat the plot."""
    label = "".join(c if c.isprintable() else " " for c in str(text))
    if len(label) > width:
        label = label[: width - 1] + "…"
    label = label.replace("$", r"\$")
    return " " + label if label.startswith("_") else label


def _label_inches(labels: Sequence[str]) -> float:
    """Room for tick labels (fixed margins: tight_layout measured half the plotting time)."""
    return 0.085 * (FONT - 1) / 9 * max((len(str(x)) for x in labels), default=4) + 0.15


def _margins(fig: Figure, left_in: float, bottom_in: float = 0.5) -> None:
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=min(0.6, left_in / w), right=1 - 0.2 / w, bottom=bottom_in / h,
                        top=1 - 0.15 / h)


# --------------------------------------------------------------------------- SVG output
def _svg(fig: Figure, tips: dict[str, list[str]], uid: str) -> str:
    """The figure as inline SVG; tips: gid → one tooltip per drawn mark of that artist."""
    FigureCanvasSVG(fig)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": uid, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None,
                                                 "Format": None, "Type": None})
    ET.register_namespace("", _SVG)
    ET.register_namespace("xlink", _XLINK)
    root = ET.fromstring(buf.getvalue())
    for gid, texts in tips.items():
        group = root.find(f".//*[@id='{gid}']")
        if group is None:
            continue
        defs = {id(el) for el in group.iterfind(f".//{{{_SVG}}}defs/*")}
        marks = [el for el in group.iter() if el.tag in (f"{{{_SVG}}}use", f"{{{_SVG}}}path")
                 and id(el) not in defs]
        if len(marks) != len(texts):  # never guess which tip belongs to which mark
            continue
        for el, text in zip(marks, texts, strict=True):
            title = ET.SubElement(el, f"{{{_SVG}}}title")
            title.text = text
    _prefix_ids(root, uid)
    root.set("class", "plot")
    root.attrib.pop("width", None)  # the page sizes it (max-width 100%), keeping its ratio
    root.attrib.pop("height", None)
    text = ET.tostring(root, encoding="unicode")
    text = text.replace(f' xmlns="{_SVG}"', "").replace(f' xmlns:xlink="{_XLINK}"', "")
    return text.replace("xlink:href=", "href=")


_URL_REF = re.compile(r"url\(#([^)]+)\)")


def _prefix_ids(root: ET.Element, uid: str) -> None:
    """Ids unique per figure: two figures on one page may draw the same marker or clip."""
    href = f"{{{_XLINK}}}href"
    for el in root.iter():
        for attr, value in list(el.attrib.items()):
            if attr == "id":
                el.set(attr, f"{uid}-{value}")
            elif attr in (href, "href") and value.startswith("#"):
                el.set(attr, f"#{uid}-{value[1:]}")
            elif "url(#" in value:
                el.set(attr, _URL_REF.sub(lambda m: f"url(#{uid}-{m.group(1)})", value))


def _uid(parts: Sequence[str]) -> str:
    return "f" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


# --------------------------------------------------------------------------- tooltips
def _num(x: object, digits: int = 6) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{float(x):.{digits}g}"  # type: ignore[arg-type]


def submission_tip(row: dict) -> str:
    """What hovering over a submission's point says: who, which archive, the numbers, when."""
    lines = [f"{row['source']} · {row['name']}",
             f"raw {_num(row['score'])} · rescaled {_num(row.get('rescaled'), 4)}"]
    when = []
    if row.get("elapsed_s") is not None and not pd.isna(row.get("elapsed_s")):
        when.append(f"at {row['elapsed_s'] / 3600:.2f} h agent time")
    if row.get("graded_at"):
        when.append(f"graded {str(row['graded_at'])[:19].replace('T', ' ')}")
    if when:
        lines.append(" · ".join(when))
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures
def leaderboard_svg(board: pd.DataFrame, colors: dict[str, str]) -> str | None:
    if board.empty:
        return None
    labels = [_label(s) for s in board["source"]]
    fig = Figure(figsize=(WIDTH_IN, 0.32 * len(board) + 0.8))
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        order = board.iloc[::-1]
        bars = ax.barh(range(len(order)), order["score"].fillna(0),
                       color=[colors.get(s, "#333333") for s in order["source"]])
        tips = []
        for i, (bar, rec) in enumerate(zip(bars.patches, order.to_dict("records"),
                                           strict=True)):
            bar.set_gid(f"bar{i}")
            tips.append((f"bar{i}", f"{rec['source']}: {_num(rec['score'], 4)} "
                                    f"({rec['tasks_valid']} of {rec['tasks']} tasks valid)"))
        ax.set_yticks(range(len(order)), labels[::-1])
        ax.set_xlim(0, 100)
        ax.set_xlabel("mean rescaled best (0–100)")
        ax.grid(axis="x", alpha=0.3)
        _margins(fig, left_in=_label_inches(labels) + 0.2)
        return _svg(fig, {gid: [t] for gid, t in tips}, _uid(["board", board.to_csv()]))


def budgets_svg(budgets: pd.DataFrame, colors: dict[str, str]) -> str | None:
    if budgets.empty:
        return None
    fig = Figure(figsize=(WIDTH_IN, 3.0))
    tips: dict[str, list[str]] = {}
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        for i, (source, rows) in enumerate(budgets.groupby("source", sort=True)):
            color = colors.get(str(source), "#333333")
            ax.plot(rows["budget_h"], rows["score"], color=color, label=_label(source))
            pts = ax.scatter(rows["budget_h"], rows["score"], s=18, color=color, zorder=3)
            pts.set_gid(f"b{i}")
            tips[f"b{i}"] = [f"{source}: {_num(s, 4)} within {h:g} h"
                             for h, s in zip(rows["budget_h"], rows["score"], strict=True)]
        ax.set_xlabel("agent time budget (hours)")
        ax.set_ylabel("mean score")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        _margins(fig, left_in=0.6)
        return _svg(fig, tips, _uid(["budgets", budgets.to_csv()]))


def _sample(rows: pd.DataFrame, keep: pd.Series | None = None) -> pd.DataFrame:
    """At most MAX_POINTS rows per source (fixed seed: same tables, same picture), always
    including the rows flagged in `keep`."""
    parts = []
    for _, part in rows.groupby("source", sort=True):
        if len(part) > MAX_POINTS:
            must = part[keep.reindex(part.index, fill_value=False)] if keep is not None \
                else part.iloc[0:0]
            rest = part.drop(must.index)
            take = max(0, MAX_POINTS - len(must))
            part = pd.concat([must, rest.sample(min(take, len(rest)), random_state=0)])
        parts.append(part)
    return pd.concat(parts) if parts else rows


def _best_so_far(timed: pd.DataFrame, direction: str) -> pd.Series:
    by = timed.groupby("source", sort=False)["score"]
    return by.cummin() if direction == "minimize" else by.cummax()


def task_time_svg(task: Task, rows: pd.DataFrame, colors: dict[str, str]) -> str | None:
    """Best so far over agent time per source (a step line), every valid timed submission
    as a point with its tooltip. Rescaled when the task has a rescale table, else raw."""
    timed = rows[rows["valid"] & rows["elapsed_s"].notna() & rows["score"].notna()]
    if timed.empty:
        return None
    timed = timed.sort_values(["source", "elapsed_s"], kind="stable")
    rescaled = task.score.rescale is not None
    best = _best_so_far(timed, task.score.direction)
    y_of = timed["rescaled"] if rescaled else timed["score"]
    fig = Figure(figsize=(WIDTH_IN, 2.9))
    tips: dict[str, list[str]] = {}
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        for i, (source, part) in enumerate(timed.groupby("source", sort=True)):
            color = colors.get(str(source), "#333333")
            b = best.loc[part.index]
            curve = b if not rescaled else b.map(
                part.drop_duplicates("score").set_index("score")["rescaled"])
            ax.step(part["elapsed_s"] / 3600, curve, where="post", color=color,
                    label=_label(source), linewidth=1.4)
            improved = b.ne(b.shift())
            shown = _sample(part, improved)
            pts = ax.scatter(shown["elapsed_s"] / 3600, y_of.loc[shown.index], s=14,
                             color=color, alpha=0.6, zorder=3, linewidths=0)
            pts.set_gid(f"t{i}")
            tips[f"t{i}"] = [submission_tip(r) for r in shown.to_dict("records")]
        ax.set_xlabel("agent time (hours)")
        ax.set_ylabel("rescaled (0–100)" if rescaled else "raw score")
        if rescaled:
            ax.set_ylim(-3, 103)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        _margins(fig, left_in=0.65)
        return _svg(fig, tips, _uid(["time", task.id]))


def task_distribution_svg(task: Task, rows: pd.DataFrame, colors: dict[str, str]) -> str | None:
    """Valid raw scores per source: a box over all of them, a jittered point per submission
    (at most MAX_POINTS per source) with its tooltip."""
    valid = rows[rows["valid"] & rows["score"].notna()]
    valid = valid[np.isfinite(valid["score"].to_numpy(dtype="float64"))]
    if valid.empty:
        return None
    sources = sorted(valid["source"].unique())
    labels = [_label(s) for s in sources]
    fig = Figure(figsize=(WIDTH_IN, 0.38 * len(sources) + 0.95))
    tips: dict[str, list[str]] = {}
    rng = np.random.default_rng(0)
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        data = [valid.loc[valid["source"] == s, "score"].to_numpy() for s in sources]
        ax.boxplot(data, orientation="horizontal", showfliers=False, widths=0.5,
                   boxprops={"color": "#777777"}, whiskerprops={"color": "#777777"},
                   capprops={"color": "#777777"}, medianprops={"color": "#222222"})
        for i, source in enumerate(sources, start=1):
            shown = _sample(valid[valid["source"] == source])
            pts = ax.scatter(shown["score"], i + rng.uniform(-0.18, 0.18, len(shown)), s=12,
                             alpha=0.55, color=colors.get(source, "#333333"), linewidths=0)
            pts.set_gid(f"d{i}")
            tips[f"d{i}"] = [submission_tip(r) for r in shown.to_dict("records")]
        ax.set_yticks(range(1, len(sources) + 1), labels)
        better = "lower" if task.score.direction == "minimize" else "higher"
        ax.set_xlabel(f"valid raw score ({better} is better)")
        ax.grid(axis="x", alpha=0.3)
        _margins(fig, left_in=_label_inches(labels) + 0.2)
        return _svg(fig, tips, _uid(["dist", task.id]))
