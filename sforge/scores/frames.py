"""The results of a benchmark as pandas DataFrames, for notebooks and scripts.

    from sforge import load_results
    res = load_results("results/edgebench")
    res.leaderboard.head(); res.scores.query("not valid"); res.details

The tables are the CSVs `sforge report` writes, read with their schemas (task ids stay
strings, an empty field is the only missing value) and with times parsed as UTC datetimes.
`details` and `metrics` come from the eval result files, one row per test or metric, read
when first asked for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sforge.benchmark.layout import Layout
from sforge.core.errors import SforgeError
from sforge.grading.feedback import DETAIL_COLUMNS, read_feedback
from sforge.scores import SCORES_COLUMNS, read_best, read_budgets, read_leaderboard, read_table

TIME_COLUMNS = ("graded_at", "submitted_at")


def _times(frame: pd.DataFrame) -> pd.DataFrame:
    for col in TIME_COLUMNS:
        if col in frame.columns:
            frame[col] = pd.to_datetime(frame[col], utc=True, format="ISO8601",
                                        errors="coerce")
    return frame


@dataclass
class Results:
    """The DataFrames of one results folder (`<results>/<benchmark name>/`)."""

    root: Path
    scores: pd.DataFrame  # one row per graded submission
    best: pd.DataFrame  # per (source, task): the best valid result
    leaderboard: pd.DataFrame  # per source: rank, mean score, per-category means
    budgets: pd.DataFrame  # per (source, budget_h): the score within that agent time

    def _result_files(self) -> pd.DataFrame:
        keys = self.scores[["task", "key"]].drop_duplicates().sort_values(["task", "key"])
        layout = Layout(self.root)
        keys["path"] = [layout.eval_result(t, k) for t, k in keys.itertuples(index=False)]
        return keys

    @functools.cached_property
    def details(self) -> pd.DataFrame:
        """One row per test a grader reported: task, key (join with scores on it), test,
        status, score, message. Several submissions with the same archive share a key."""
        rows = []
        for task, key, path in self._result_files().itertuples(index=False):
            for d in read_feedback(path).details:
                rows.append((task, key, d.test, d.status, d.score, d.message))
        frame = pd.DataFrame(rows, columns=["task", "key", *DETAIL_COLUMNS])
        return frame.astype({"task": "str", "key": "str", "test": "str", "status": "str",
                             "score": "float64", "message": "str"})

    @functools.cached_property
    def metrics(self) -> pd.DataFrame:
        """One row per metric a grader reported: task, key, metric, value (number or text)."""
        rows = [(task, key, name, value)
                for task, key, path in self._result_files().itertuples(index=False)
                for name, value in read_feedback(path).metrics.items()]
        return pd.DataFrame(rows, columns=["task", "key", "metric", "value"]).astype(
            {"task": "str", "key": "str", "metric": "str"})


def load_results(path: str | Path = "results/edgebench") -> Results:
    """The score tables of `path` (a `<results>/<benchmark name>` folder) as DataFrames.

    Made by `sforge report`; an error names the missing file otherwise."""
    root = Path(path).expanduser().resolve()
    layout = Layout(root)
    missing = [p for p in (layout.scores, layout.best, layout.leaderboard, layout.budgets)
               if not p.is_file()]
    if missing:
        raise SforgeError(f"{missing[0]}: not found (make the tables with `sforge report`; "
                          f"load_results takes a <results>/<benchmark name> folder)")
    return Results(
        root=root,
        scores=_times(read_table(layout.scores, SCORES_COLUMNS)),
        best=_times(read_best(layout.best)),
        leaderboard=read_leaderboard(layout.leaderboard),
        budgets=read_budgets(layout.budgets),
    )


__all__ = ["Results", "load_results"]
