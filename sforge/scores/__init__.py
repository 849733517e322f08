"""Eval results → scores.csv → best.csv → leaderboard (CSV, Markdown) and time budgets.

Every table is derived with pandas from the one before it. `sforge report` and the Snakemake
report rule make them all at once, by task (sforge.scores.parts, driven by
sforge.report.update); write_scores, write_best and write_leaderboard make each table from
the one before it, in the same bytes (tests compare the two). The rules:

- scores.csv: one row per graded submission (several submissions may share one result file:
  identical archives are graded once). `rescaled` is the 0–100 score of docs/rescale.md;
  it is empty for invalid results and for tasks without a rescale table (never 0).
- best.csv: per (source, task), the best valid raw score in the task's direction; ties go
  to the earliest submission (submitted_at, then elapsed_s, then graded_at). Invalid
  results never win, whatever their raw score. Direction and rescale tables come from the
  benchmark as loaded (task.toml), not from scores.csv. As ranking is by raw score, a
  best raw score that a guard maps to 0 (compression_ratio_cropped_guarded below 0.05,
  the min kinds at r ≤ 0) stays the best, even over a valid result that rescales higher.
- leaderboard: per source, the mean rescaled best over EVERY task of the benchmark. A task
  without a valid result counts 0, and so does a best result without a rescaled score (a
  task with no rescale table): the mean is over the same denominator for every source.
  Also one column per task category and the count of tasks with a valid result.
- budgets.csv: the same mean, computed only from submissions made within each time budget
  (elapsed_s ≤ hours·3600), for the sources whose submissions carry elapsed times.

Reading 100,000 result files costs seconds (JSON parsing holds the GIL, so threads do not
help on this machine; they made it 2–3× slower); parsed results are therefore cached next to
scores.csv, keyed by path and (inode, size, mtime, ctime), so re-aggregation only parses the
files that changed. Result files and caches are parsed with orjson (json as the fallback for
what only Python's json reads). write_scores also leaves the ranking columns of scores.csv as
a JSON sidecar in .cache/, tagged with the CSV's stat, so best.csv and the leaderboard do not
parse the CSV again; a CSV changed by anything else is parsed as before.

Modules: columns and tables (schemas, CSV I/O), cache (parsed result files), ranking
(scores.csv, best.csv), leaderboard (leaderboard, budgets), parts and store (the tables by
task and their store), folders (the fingerprints that decide which tasks changed), terminal
(the leaderboard as printed), frames (the tables for notebooks).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers; at run time each loads on first use
    from sforge.scores.cache import read_results
    from sforge.scores.leaderboard import (
        DEFAULT_BUDGETS_H,
        budget_rows,
        category_columns,
        leaderboard_rows,
        write_leaderboard,
    )
    from sforge.scores.ranking import (
        best_rows,
        newest_first,
        not_valid_rows,
        rescale_column,
        score_rows,
        write_best,
        write_scores,
    )
    from sforge.scores.tables import (
        BEST_COLUMNS,
        BUDGETS_COLUMNS,
        LEADERBOARD_HEAD,
        LEADERBOARD_TAIL,
        RANKING_COLUMNS,
        SCORES_COLUMNS,
        csv_text,
        read_best,
        read_budgets,
        read_leaderboard,
        read_scores,
        read_table,
    )
    from sforge.scores.terminal import leaderboard_text

# name → its module: `from sforge.scores.cache import ...` (what grading reads) must not
# import pandas, which the table modules need (~0.7 s on this machine)
_EXPORTS = {
    "read_results": "cache",
    "DEFAULT_BUDGETS_H": "leaderboard",
    "budget_rows": "leaderboard",
    "category_columns": "leaderboard",
    "leaderboard_rows": "leaderboard",
    "leaderboard_text": "terminal",
    "write_leaderboard": "leaderboard",
    "best_rows": "ranking",
    "newest_first": "ranking",
    "not_valid_rows": "ranking",
    "rescale_column": "ranking",
    "score_rows": "ranking",
    "write_best": "ranking",
    "write_scores": "ranking",
    "BEST_COLUMNS": "tables",
    "BUDGETS_COLUMNS": "tables",
    "LEADERBOARD_HEAD": "tables",
    "LEADERBOARD_TAIL": "tables",
    "RANKING_COLUMNS": "tables",
    "SCORES_COLUMNS": "tables",
    "csv_text": "tables",
    "read_best": "tables",
    "read_budgets": "tables",
    "read_leaderboard": "tables",
    "read_scores": "tables",
    "read_table": "tables",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "BEST_COLUMNS", "BUDGETS_COLUMNS", "DEFAULT_BUDGETS_H", "LEADERBOARD_HEAD",
    "LEADERBOARD_TAIL", "RANKING_COLUMNS", "SCORES_COLUMNS", "best_rows", "budget_rows",
    "category_columns", "csv_text", "leaderboard_rows", "leaderboard_text", "newest_first",
    "not_valid_rows", "read_best",
    "read_budgets", "read_leaderboard", "read_results", "read_scores", "read_table",
    "rescale_column", "score_rows", "write_best", "write_leaderboard", "write_scores",
]
