"""The tables' columns, without pandas: the table store checks a stored part against
them on the path that decides, without pandas, that nothing changed."""

from __future__ import annotations

# Column → dtype of each table; the files are written and read back through these, so a
# task id like "0012" stays a string and an empty field is the only missing value.
SCORES_COLUMNS: dict[str, str] = {
    "task": "str",
    "source": "str",
    "name": "str",
    "submission": "str",  # archive sha256
    "key": "str",  # eval key: the result file is evals/<task>/<key>.json
    "valid": "bool",
    "score": "float64",  # raw
    "rescaled": "float64",  # 0–100; empty when invalid or no rescale table
    "direction": "str",
    "summary": "str",
    "reason": "str",
    "judge_image": "str",
    "judge_image_id": "str",  # the judge image's id when graded (empty in older results)
    "graded_at": "str",  # the result's finished_at
    "duration_s": "float64",
    "submitted_at": "str",
    "elapsed_s": "float64",
    "agent": "str",
    "model": "str",
}

BEST_COLUMNS: dict[str, str] = {
    "source": "str",
    "task": "str",
    "category": "str",
    "direction": "str",
    "score": "float64",
    "rescaled": "float64",
    "submission": "str",
    "name": "str",
    "key": "str",
    "submitted_at": "str",
    "elapsed_s": "float64",
    "graded_at": "str",
    "agent": "str",
    "model": "str",
    "valid_count": "int64",  # valid results of this source on this task
    "submissions": "int64",  # graded submissions of this source on this task
}

# Leaderboard columns around the per-category ones (inserted after "score").
LEADERBOARD_HEAD: dict[str, str] = {
    "rank": "int64",
    "source": "str",
    "agent": "str",
    "model": "str",
    "score": "float64",
}
LEADERBOARD_TAIL: dict[str, str] = {"tasks_valid": "int64", "tasks": "int64"}

BUDGETS_COLUMNS: dict[str, str] = {
    "source": "str",
    "budget_h": "float64",
    "score": "float64",
    "tasks_valid": "int64",
}

NEWEST_INVALID = 100  # invalid rows per task kept for the report's index (it lists the newest)
# What the index shows of an invalid row (sforge.report.pages).
INVALID_FIELDS = ("task", "source", "name", "key", "reason", "summary", "graded_at")
