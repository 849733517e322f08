"""What a verdict is worth on a task: above the floor (doing nothing must not pay), full
marks (the reference must get them). One rule for `sforge check --integrity`, `sforge prove`
and the report."""

from __future__ import annotations

from sforge.benchmark.model import Task
from sforge.benchmark.rescaling import rescale


def rescaled(task: Task, valid: bool, score: float | None) -> float | None:
    """The verdict on the 0–100 scale; None when invalid or the task has no table."""
    return rescale(task.score.rescale, score) if valid and score is not None else None


def above_floor(task: Task, valid: bool, score: float | None) -> bool | None:
    """Whether a verdict pays something: rescaled above 0; without a rescale table a
    maximized raw score above 0; None when that cannot be told (minimized, no table)."""
    if not valid or score is None:
        return False
    if task.score.rescale is not None:
        return (rescaled(task, valid, score) or 0.0) > 0.0
    if task.score.direction == "maximize":
        return score > 0
    return None


def full_marks(task: Task, valid: bool, score: float | None) -> bool:
    """Rescaled 100 (with a table); valid otherwise."""
    if not valid or score is None:
        return False
    if task.score.rescale is not None:
        return (rescaled(task, valid, score) or 0.0) >= 100.0 - 1e-9
    return True


def at_least(task: Task, score: float | None, other: float | None) -> bool:
    """`score` is as good as `other` in the task's direction."""
    if score is None or other is None:
        return False
    return score >= other if task.score.direction == "maximize" else score <= other


def oracle_skipped(task: Task) -> str | None:
    """Why the oracle proof of `task` (its [reference] at full marks) cannot be made: it has
    no [reference]. One decision and one message for `sforge prove` and `sforge check
    --integrity`; None when the task has a reference."""
    return None if task.reference is not None else "no [reference]: the oracle proof is skipped"
