"""The grading contract's parts that every grader shares: the task as judged (with an
override), and the archive and container limits from the configuration.

`sforge eval`, the Snakemake rule, the judge service and tools/judge_local.py all grade
through these, so the same archive under the same settings gets the same key and the same
limits everywhere. The one grading function that every path calls, `grade`, builds on them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from sforge.core.errors import SforgeError

if TYPE_CHECKING:
    from sforge.benchmark.model import Task
    from sforge.grading.archive import ArchiveLimits
    from sforge.grading.judge import ContainerLimits


def judged_task(task: Task, timeout: float | None = None) -> Task:
    """`task` with `timeout` (seconds) as its judge's wall clock; the eval key follows the
    judge settings, so an override is graded under a key of its own. A timeout that is not
    a finite number of seconds above 0 (as [judge] timeout_sec) is an input error."""
    if timeout is None:
        return task
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise SforgeError(f"--timeout {timeout}: expected a finite number of seconds "
                          "above 0")
    return dataclasses.replace(task, judge=dataclasses.replace(task.judge,
                                                               timeout_sec=float(timeout)))


def archive_limits(config: dict[str, Any]) -> ArchiveLimits:
    """ArchiveLimits' own defaults, with what config.yaml's archive_limits overrides: the
    defaults live in the dataclass only, so config.yaml ships no copy of them."""
    from sforge.grading.archive import ArchiveLimits

    return ArchiveLimits(**(config.get("archive_limits") or {}))


def container_limits(config: dict[str, Any]) -> ContainerLimits:
    """ContainerLimits' own defaults, with what config.yaml's judge_limits overrides."""
    from sforge.grading.judge import ContainerLimits

    return ContainerLimits(**(config.get("judge_limits") or {}))
