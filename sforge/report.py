"""report.html: one self-contained page (no network, no external file) over the score tables.

It shows the leaderboard, the time budgets, a task × source table of rescaled bests and, per
task, the best-so-far over agent time and the distribution of valid raw scores. Plots are
matplotlib PNGs embedded as base64, styles and the table-sorting script are inline, and the
page holds no URL at all, so it opens offline and from a CI artifact as it is.

Matplotlib is used through Figure objects, never pyplot: no global state, so the report can
be written from a thread (Snakemake's --force-use-threads) or next to other plots.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import __version__
from .fileio import atomic_write_bytes, atomic_write_text
from .model import Benchmark, Task
from .scores import category_columns, read_best, read_budgets, read_leaderboard, read_scores

MAX_POINTS = 400  # jittered points per source in a distribution plot; the box shows them all
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")


# --------------------------------------------------------------------------- plots
def _png_bytes(fig: Figure) -> bytes:
    """PNG metadata stripped: it would name matplotlib's URL."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, metadata={"Software": None})
    return buf.getvalue()


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _png(fig: Figure) -> str:
    return _data_uri(_png_bytes(fig))


class PlotCache:
    """Per-task PNGs keyed by a hash of exactly what they plot.

    A figure costs 0.1–0.3 s of matplotlib, so 200 tasks take most of a minute; when one
    result changes, only that task's picture is drawn again. Entries not used by the latest
    report are deleted, so the directory never outgrows one report."""

    def __init__(self, directory: Path | None):
        self.directory = directory
        self.used: set[str] = set()

    def get(self, parts: Sequence[str], make: Callable[[], Figure | None]) -> str | None:
        digest = hashlib.sha256("\0".join([__version__, matplotlib.__version__, *parts])
                                .encode()).hexdigest()[:32]
        path = self.directory / f"{digest}.png" if self.directory else None
        if path is not None and path.is_file():
            self.used.add(path.name)
            return _data_uri(path.read_bytes())
        fig = make()
        if fig is None:
            return None
        png = _png_bytes(fig)
        if path is not None:
            try:
                atomic_write_bytes(path, png)
                self.used.add(path.name)
            except OSError:
                pass  # a read-only tree: no cache, same page
        return _data_uri(png)

    def prune(self) -> None:
        if self.directory is None or not self.directory.is_dir():
            return
        for old in self.directory.glob("*.png"):
            if old.name not in self.used:
                old.unlink(missing_ok=True)


def _label(text: object, width: int = 28) -> str:
    """A source name as matplotlib text: "$" would start mathtext (and a malformed formula
    raises while drawing), a leading "_" hides a legend entry, long names eat the plot."""
    label = "".join(c if c.isprintable() else " " for c in str(text))
    if len(label) > width:
        label = label[: width - 1] + "…"
    label = label.replace("$", r"\$")
    return " " + label if label.startswith("_") else label


def _label_inches(labels: Sequence[str] | pd.Series) -> float:
    """Room for tick labels at fontsize "small": fixed margins instead of tight_layout, which
    measured about half of all plotting time."""
    return 0.075 * max((len(str(x)) for x in labels), default=4)


def _margins(fig: Figure, left_in: float, wspace_in: float = 0.0) -> None:
    w, h = fig.get_size_inches()
    axes = len(fig.axes)
    panel_w = (w - left_in - 0.25 - wspace_in * (axes - 1)) / max(axes, 1)
    fig.subplots_adjust(left=left_in / w, right=1 - 0.25 / w, bottom=0.55 / h, top=1 - 0.2 / h,
                        wspace=wspace_in / panel_w if axes > 1 else 0.2)


def _color(sources: Sequence[str]) -> dict[str, str]:
    return {s: COLORS[i % len(COLORS)] for i, s in enumerate(sources)}


def _board_plot(board: pd.DataFrame, colors: dict[str, str]) -> str | None:
    if board.empty:
        return None
    fig = Figure(figsize=(8, 0.45 * len(board) + 0.9))
    ax = fig.add_subplot()
    order = board.iloc[::-1]
    ax.barh(range(len(order)), order["score"].fillna(0),
            color=[colors[s] for s in order["source"]])
    ax.set_yticks(range(len(order)), [_label(s) for s in order["source"]])
    ax.set_xlim(0, 100)
    ax.set_xlabel("mean rescaled best over all tasks (0–100)")
    ax.grid(axis="x", alpha=0.3)
    _margins(fig, left_in=_label_inches([_label(s) for s in board["source"]]) + 0.3)
    return _png(fig)


def _budget_plot(budgets: pd.DataFrame, colors: dict[str, str]) -> str | None:
    if budgets.empty:
        return None
    fig = Figure(figsize=(8, 3.2))
    ax = fig.add_subplot()
    for source, rows in budgets.groupby("source", sort=True):
        ax.plot(rows["budget_h"], rows["score"], marker="o", label=_label(source),
                color=colors.get(str(source), "#333333"))
    ax.set_xlabel("agent time budget (hours)")
    ax.set_ylabel("mean score")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    _margins(fig, left_in=0.8)
    return _png(fig)


def _best_so_far(rows: pd.DataFrame, direction: str, rescaled: bool) -> pd.DataFrame:
    """Per source: (hours, best so far) at each timed valid submission, in time order."""
    timed = rows[rows["valid"] & rows["elapsed_s"].notna() & rows["score"].notna()]
    timed = timed.sort_values(["source", "elapsed_s"], kind="stable")
    by_source = timed.groupby("source", sort=False)["score"]
    best_raw = by_source.cummin() if direction == "minimize" else by_source.cummax()
    out = pd.DataFrame({"source": timed["source"], "hours": timed["elapsed_s"] / 3600.0,
                        "best": best_raw})
    if rescaled:  # the rescaled score of the best raw so far, as best.csv ranks
        lookup = timed.drop_duplicates("score").set_index("score")["rescaled"]
        out["best"] = best_raw.map(lookup)
    return out


def _task_figure(task: Task, rows: pd.DataFrame, colors: dict[str, str]) -> Figure | None:
    """Best-so-far over agent time (where times exist) and the distribution of valid raws."""
    valid = rows[rows["valid"] & rows["score"].notna()]
    if valid.empty:
        return None
    direction = task.score.direction
    has_table = task.score.rescale is not None
    curve = _best_so_far(rows, direction, has_table)
    panels = 2 if len(curve) else 1
    fig = Figure(figsize=(10, 0.3 * valid["source"].nunique() + 2.4))
    axes = fig.subplots(1, panels, squeeze=False)[0]
    if len(curve):
        ax = axes[0]
        for source, line in curve.groupby("source", sort=True):
            ax.step(line["hours"], line["best"], where="post", marker=".",
                    color=colors.get(str(source), "#333333"), label=_label(source))
        ax.set_xlabel("agent time (hours)")
        ax.set_ylabel("best so far (rescaled)" if has_table else "best raw so far")
        if has_table:
            ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small", loc="best")
    ax = axes[-1]
    sources = sorted(valid["source"].unique())
    data = [valid.loc[valid["source"] == s, "score"].to_numpy() for s in sources]
    ax.boxplot(data, orientation="horizontal", showfliers=False, widths=0.5)
    rng = np.random.default_rng(0)  # fixed jitter: the same tables give the same picture
    for i, (source, values) in enumerate(zip(sources, data, strict=True), start=1):
        shown = values if len(values) <= MAX_POINTS else rng.choice(values, MAX_POINTS,
                                                                    replace=False)
        ax.scatter(shown, i + rng.uniform(-0.18, 0.18, len(shown)), s=6, alpha=0.5,
                   color=colors.get(source, "#333333"))
    ax.set_yticks(range(1, len(sources) + 1), [_label(x) for x in sources], fontsize="small")
    ax.set_xlabel(f"valid raw score ({'lower' if direction == 'minimize' else 'higher'} "
                  "is better)")
    ax.grid(axis="x", alpha=0.3)
    label_in = _label_inches([_label(x) for x in sources]) + 0.25
    if panels == 2:
        _margins(fig, left_in=0.75, wspace_in=label_in + 0.3)
    else:
        _margins(fig, left_in=label_in)
    return fig


PLOTTED = ["source", "valid", "score", "rescaled", "elapsed_s"]


def _task_plot(task: Task, rows: pd.DataFrame, colors: dict[str, str],
               cache: PlotCache) -> str | None:
    if not (rows["valid"] & rows["score"].notna()).any():
        return None  # nothing to plot: no figure, no cache entry
    used = sorted(rows["source"].unique())
    parts = [task.id, task.score.direction, str(task.score.rescale is not None),
             repr([(s, colors.get(s)) for s in used]),
             rows[PLOTTED].sort_values(PLOTTED, kind="stable").to_csv(index=False)]
    return cache.get(parts, lambda: _task_figure(task, rows, colors))


# --------------------------------------------------------------------------- page model
def _fmt(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float | np.floating):
        return f"{x:.{digits}f}"
    return str(x)


def _raw(x: float) -> str:
    return "" if x is None or math.isnan(x) else f"{x:.6g}"


def _shade(x: float | None) -> str:
    """A background for a 0–100 cell: pale red at 0 through pale green at 100."""
    if x is None or math.isnan(x):
        return ""
    return f"background-color:hsl({round(1.2 * max(0.0, min(100.0, x)))},70%,85%)"


@dataclass
class Cell:
    text: str
    sort: str = ""  # data-v: the value the sorting script compares
    style: str = ""
    title: str = ""


@dataclass
class TaskSection:
    id: str
    name: str
    category: str
    direction: str
    kind: str
    submissions: int
    valid: int
    best: list[dict[str, str]]
    plot: str | None


def _leaderboard_table(bench: Benchmark, board: pd.DataFrame) -> tuple[list[str],
                                                                       list[list[Cell]]]:
    cats = list(category_columns(bench).values())
    header = ["rank", "source", "agent", "model", "score", *cats, "tasks with a valid result"]
    rows = []
    for rec in board.to_dict("records"):
        rows.append([
            Cell(_fmt(rec["rank"]), str(rec["rank"])),
            Cell(_fmt(rec["source"])),
            Cell(_fmt(rec["agent"])),
            Cell(_fmt(rec["model"])),
            Cell(_fmt(rec["score"]), _fmt(rec["score"], 9), _shade(rec["score"])),
            *[Cell(_fmt(rec[c]), _fmt(rec[c], 9), _shade(rec[c])) for c in cats],
            Cell(f"{rec['tasks_valid']} / {rec['tasks']}", str(rec["tasks_valid"])),
        ])
    return header, rows


def _task_table(bench: Benchmark, best: pd.DataFrame, scores: pd.DataFrame,
                sources: list[str]) -> tuple[list[str], list[list[Cell]]]:
    header = ["task", "category", "direction", "graded", *sources]
    graded = scores.groupby("task").size()
    lookup = best.set_index(["task", "source"])
    rows = []
    for task in bench.tasks.values():
        row = [Cell(task.id, task.id, title=task.name), Cell(task.category or ""),
               Cell(task.score.direction), Cell(str(int(graded.get(task.id, 0))),
                                                str(int(graded.get(task.id, 0))))]
        for source in sources:
            if (task.id, source) not in lookup.index:
                row.append(Cell("—", "-1", title="no valid result: counts 0"))
                continue
            b = lookup.loc[(task.id, source)]
            if pd.isna(b["rescaled"]):
                row.append(Cell(f"raw {_raw(b['score'])}", "-0.5",
                                title="no rescale table: counts 0 in the mean"))
            else:
                row.append(Cell(_fmt(b["rescaled"]), _fmt(b["rescaled"], 9),
                                _shade(b["rescaled"]),
                                title=f"raw {_raw(b['score'])} · {b['name']}"))
        rows.append(row)
    return header, rows


def _sections(bench: Benchmark, best: pd.DataFrame, scores: pd.DataFrame,
              colors: dict[str, str], cache: PlotCache) -> list[TaskSection]:
    sections = []
    by_task = dict(tuple(scores.groupby("task", sort=False)))
    best_by_task = dict(tuple(best.groupby("task", sort=False)))
    for task in bench.tasks.values():
        rows = by_task.get(task.id, scores.iloc[0:0])
        kind = str(task.score.rescale["kind"]) if task.score.rescale else "none"
        tb = best_by_task.get(task.id, best.iloc[0:0])
        sections.append(TaskSection(
            id=task.id, name=task.name, category=task.category or "",
            direction=task.score.direction, kind=kind, submissions=len(rows),
            valid=int(rows["valid"].sum()),
            best=[{"source": r["source"], "score": _raw(r["score"]),
                   "rescaled": _fmt(r["rescaled"]), "name": r["name"],
                   "elapsed": _fmt(r["elapsed_s"] / 3600.0) if pd.notna(r["elapsed_s"]) else ""}
                  for r in tb.to_dict("records")],
            plot=_task_plot(task, rows, colors, cache),
        ))
    return sections


def _budget_table(budgets: pd.DataFrame) -> tuple[list[str], list[list[Cell]]]:
    if budgets.empty:
        return [], []
    wide = budgets.pivot(index="source", columns="budget_h", values="score")
    header = ["source", *[f"{h:g}h" for h in wide.columns]]
    rows = [[Cell(str(src))] + [Cell(_fmt(v), _fmt(v, 9), _shade(v)) for v in vals]
            for src, vals in zip(wide.index, wide.to_numpy().tolist(), strict=True)]
    return header, rows


# --------------------------------------------------------------------------- page
TEMPLATES = "templates"  # report.html.j2 (the page) and table.html.j2 (its table macro)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("sforge", TEMPLATES),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    macros = env.get_template("table.html.j2").module
    env.globals["table"] = macros.table  # type: ignore[attr-defined]
    return env


def render_report(bench: Benchmark, scores: pd.DataFrame, best: pd.DataFrame,
                  board: pd.DataFrame, budgets: pd.DataFrame,
                  plot_cache: Path | None = None) -> str:
    """The page as a string, from the tables as read_* returns them; per-task plots are
    reused from `plot_cache` (a directory) when their data did not change."""
    cache = PlotCache(plot_cache)
    sources = list(board["source"]) if len(board) else sorted(scores["source"].unique())
    colors = _color(sources)
    board_header, board_rows = _leaderboard_table(bench, board)
    task_header, task_rows = _task_table(bench, best, scores, sources)
    budget_header, budget_rows = _budget_table(budgets)
    html = _environment().get_template("report.html.j2").render(
        bench=bench, tasks=list(bench.tasks.values()), n_sources=len(sources),
        n_graded=len(scores), n_valid=int(scores["valid"].sum()),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), version=__version__,
        errors=[str(e) for e in bench.errors],
        board_header=board_header, board_rows=board_rows, board_plot=_board_plot(board, colors),
        budget_header=budget_header, budget_rows=budget_rows,
        budget_plot=_budget_plot(budgets, colors),
        task_header=task_header, task_rows=task_rows,
        sections=_sections(bench, best, scores, colors, cache),
    )
    cache.prune()
    return html


def write_report(benchmark: Benchmark, scores_csv: Path, best_csv: Path, leaderboard_csv: Path,
                 budgets_csv: Path, out_html: Path, *, cache: bool = True) -> None:
    """report.html from the four tables; opens offline (no URL, everything inline).

    cache=True keeps per-task plots in <dir of out_html>/.cache/report-plots/."""
    out_html = Path(out_html)
    plots = out_html.parent / ".cache" / "report-plots" if cache else None
    html = render_report(benchmark, read_scores(scores_csv), read_best(best_csv),
                         read_leaderboard(leaderboard_csv), read_budgets(budgets_csv), plots)
    atomic_write_text(out_html, html)
