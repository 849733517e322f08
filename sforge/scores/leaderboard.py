"""The leaderboard (CSV, Markdown, terminal) and the time budgets, from best.csv and scores.csv."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sforge.benchmark.model import Benchmark
from sforge.core.bulk import no_gc
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_text
from sforge.scores.ranking import best_of_ranked, ranked_rows
from sforge.scores.tables import (
    BUDGETS_COLUMNS,
    LEADERBOARD_HEAD,
    LEADERBOARD_TAIL,
    RANKING_COLUMNS,
    empty_table,
    read_best,
    read_leaderboard,
    read_scores,
    write_csv,
)

log = logging.getLogger(__name__)

DEFAULT_BUDGETS_H: tuple[float, ...] = (2, 4, 6, 8, 10, 12)

def category_columns(bench: Benchmark) -> dict[str, str]:
    """Category → its leaderboard column. Plain category names, unless one collides with a
    fixed column (a category called "score"), which becomes "category:score". Only ranked
    tasks count (benchmark.toml's exclude_status leaves the others out)."""
    tasks = bench.ranked_tasks.values()
    cats = sorted({t.category for t in tasks if t.category is not None})
    if cats and any(t.category is None for t in tasks):
        cats.append("uncategorized")
    fixed = set(LEADERBOARD_HEAD) | set(LEADERBOARD_TAIL)
    return {c: (f"category:{c}" if c in fixed else c) for c in cats}


def _task_categories(bench: Benchmark) -> pd.Series:
    if not category_columns(bench):
        return pd.Series(dtype="str")
    return pd.Series({t.id: t.category or "uncategorized"
                      for t in bench.ranked_tasks.values()}, dtype="str")


def score_grid(bench: Benchmark, best: pd.DataFrame, sources: pd.Index) -> pd.DataFrame:
    """sources × every ranked task → rescaled best, 0 where none (see module doc)."""
    tasks = pd.Index(list(bench.ranked_tasks), dtype="str")
    grid = np.zeros((len(sources), len(tasks)))
    rows = sources.get_indexer(best["source"])
    cols = tasks.get_indexer(best["task"])
    values = best["rescaled"].to_numpy(dtype="float64", na_value=np.nan)
    ok = np.flatnonzero((rows >= 0) & (cols >= 0) & np.isfinite(values))[::-1]
    grid[rows[ok], cols[ok]] = values[ok]  # reversed: the first row of a pair wins
    return pd.DataFrame(grid, index=sources, columns=tasks)


def mean_scores(bench: Benchmark, best: pd.DataFrame, sources: pd.Index,
                categories: bool = True) -> pd.DataFrame:
    """Per source: overall mean, per-category means (unless not wanted: a budget's row has
    none, and they were most of its cost) and tasks with a valid result."""
    grid = score_grid(bench, best, sources)
    out = pd.DataFrame(index=sources)
    ranked = bench.ranked_tasks
    out["score"] = grid.mean(axis=1) if len(ranked) else np.nan
    cats = _task_categories(bench) if categories else None
    if cats is not None and len(cats):
        per_cat = grid.T.groupby(cats.reindex(grid.columns).to_numpy()).mean().T
        names = category_columns(bench)
        out[[names[c] for c in per_cat.columns]] = per_cat.to_numpy()
    valid = best[best["task"].isin(list(ranked))].groupby("source")["task"].nunique()
    out["tasks_valid"] = valid.reindex(sources).fillna(0).astype("int64")
    out["tasks"] = len(ranked)
    return out


def _joined_unique(values: pd.Series) -> str | None:
    uniq = sorted(set(values.dropna()))
    return ",".join(uniq) if uniq else None


def leaderboard_rows(bench: Benchmark, best: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per source that has graded submissions, best mean first."""
    people = scores.groupby("source").agg(agent=("agent", _joined_unique),
                                          model=("model", _joined_unique))
    return board_frame(bench, best, sorted(scores["source"].unique()),
                       {s: (a, m) for s, a, m in zip(people.index, people["agent"],
                                                     people["model"], strict=True)})


def board_frame(bench: Benchmark, best: pd.DataFrame, sources: list[str],
                people: dict[str, tuple[str | None, str | None]]) -> pd.DataFrame:
    """The leaderboard of `sources` (sorted) from best.csv's rows and each source's agents
    and models (comma-joined, or None)."""
    index = pd.Index(sources, name="source", dtype="str")
    cats = list(category_columns(bench).values())
    columns = {**LEADERBOARD_HEAD, **dict.fromkeys(cats, "float64"), **LEADERBOARD_TAIL}
    if not len(index):
        return empty_table(columns)
    board = mean_scores(bench, best, index)
    who = pd.DataFrame({"agent": [people.get(s, (None, None))[0] for s in sources],
                        "model": [people.get(s, (None, None))[1] for s in sources]},
                       index=index)
    board = board.join(who).reset_index()
    board = board.sort_values(["score", "source"], ascending=[False, True], ignore_index=True)
    board["rank"] = board["score"].rank(method="min", ascending=False).fillna(0).astype("int64")
    return board[list(columns)].astype(columns)


def check_budgets(budgets_h: Iterable[float]) -> list[float]:
    """The time budgets, sorted and each once; an error for one that is not positive hours."""
    hours = sorted({float(h) for h in budgets_h})
    bad = [h for h in hours if not (math.isfinite(h) and h > 0)]
    if bad:
        raise SforgeError(f"time budgets must be positive hours, got {bad[0]!r}")
    return hours


def budget_rows(bench: Benchmark, scores: pd.DataFrame, budgets_h: Iterable[float]) -> pd.DataFrame:
    """Per source with elapsed times and per budget: the leaderboard mean from the best valid
    result submitted within the budget. Submissions without elapsed_s are left out."""
    hours = check_budgets(budgets_h)
    timed = scores[scores["elapsed_s"].notna()]
    sources = pd.Index(sorted(timed["source"].unique()), name="source", dtype="str")
    if not len(sources) or not hours:
        return empty_table(BUDGETS_COLUMNS)
    ranked = ranked_rows(bench, timed)  # sorted once; a filter keeps the order
    frames = []
    for h in hours:  # a handful of budgets, each vectorized over all rows
        best = best_of_ranked(bench, ranked[ranked["elapsed_s"] <= h * 3600.0])
        means = mean_scores(bench, best, sources, categories=False)[
            ["score", "tasks_valid"]].reset_index()
        means.insert(1, "budget_h", h)
        frames.append(means)
    return pd.concat(frames, ignore_index=True)[list(BUDGETS_COLUMNS)].astype(BUDGETS_COLUMNS)


def _hours_label(h: float) -> str:
    return f"{h:g}h"


def leaderboard_markdown(bench: Benchmark, board: pd.DataFrame, budgets: pd.DataFrame) -> str:
    """leaderboard.md: the leaderboard and the time budgets, with how the score is made."""
    lines = [f"# Leaderboard: {bench.name}", ""]
    lines.append(
        f"Score: mean rescaled (0–100) best valid result over the {len(bench.ranked_tasks)} "
        "ranked tasks; a task without a valid result, or without a rescale table, counts 0.")
    left_out = sorted(t.id for t in bench.tasks.values() if bench.excluded(t))
    if left_out:
        lines.append(f"Not ranked (status {', '.join(bench.exclude_status)} in benchmark.toml's "
                     f"exclude_status): {', '.join(left_out)}.")
    lines += ["", _board_markdown(board) if len(board) else "No graded submissions yet.", ""]
    if len(budgets):
        wide = budgets.pivot(index="source", columns="budget_h", values="score")
        wide = wide.rename(columns=_hours_label).reset_index()
        lines += ["## Time budgets", "",
                  "Mean score from the best result submitted within each agent-time budget.", "",
                  wide.to_markdown(index=False, floatfmt=".2f"), ""]
    return "\n".join(lines)


def _board_markdown(board: pd.DataFrame) -> str:
    """A missing value (no agent, no model, no score) is an empty cell, never "nan"."""
    shown = board.dropna(axis=1, how="all") if len(board) else board
    keep = [c for c in board.columns if c in shown.columns or c in ("score", "rank", "source")]
    frame = board[keep].astype(object)
    return frame.where(frame.notna(), None).to_markdown(index=False, floatfmt=".2f",
                                                        missingval="")


def write_leaderboard(benchmark: Benchmark, best_csv: Path, scores_csv: Path, out_csv: Path,
                      out_md: Path, out_budgets: Path,
                      budgets_h: Sequence[float] = DEFAULT_BUDGETS_H) -> None:
    """leaderboard.csv, leaderboard.md and budgets.csv from best.csv and scores.csv.

    budgets_h: the time budgets in hours (any list; sorted, duplicates dropped)."""
    with no_gc():
        scores = read_scores(scores_csv, RANKING_COLUMNS)
        board = leaderboard_rows(benchmark, read_best(best_csv), scores)
        budgets = budget_rows(benchmark, scores, budgets_h)
    write_csv(board, Path(out_csv))
    write_csv(budgets, Path(out_budgets))
    atomic_write_text(Path(out_md), leaderboard_markdown(benchmark, board, budgets))


def board_text(leaderboard_csv: Path) -> str:
    """The leaderboard for the terminal, as a Markdown table (sforge.scores.terminal
    remembers it)."""
    board = read_leaderboard(leaderboard_csv)
    if board.empty:
        return "No graded submissions yet."
    return _board_markdown(board)
