"""The grading contract's parts that every grader shares: the task as judged (with an
override), and the archive and container limits from the configuration.

`sforge eval`, the Snakemake rule, the judge service and tools/judge_local.py all grade
through these, so the same archive under the same settings gets the same key and the same
limits everywhere. The one grading function itself is `sforge.workflow.targets.grade`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sforge.benchmark.model import Task
    from sforge.grading.archive_limits import ArchiveLimits
    from sforge.grading.judge_container import ContainerLimits


def judged_task(task: Task, timeout: float | None = None) -> Task:
    """`task` with `timeout` (seconds) as its judge's wall clock; the eval key follows the
    judge settings, so an override is graded under a key of its own."""
    if not timeout:
        return task
    return dataclasses.replace(task, judge=dataclasses.replace(task.judge,
                                                               timeout_sec=float(timeout)))


def archive_limits(config: dict[str, Any]) -> ArchiveLimits:
    """ArchiveLimits' own defaults, with what config.yaml's archive_limits overrides: the
    defaults live in the dataclass only, so config.yaml ships no copy of them."""
    from sforge.grading.archive_limits import ArchiveLimits

    return ArchiveLimits(**(config.get("archive_limits") or {}))


def container_limits(config: dict[str, Any]) -> ContainerLimits:
    """ContainerLimits' own defaults, with what config.yaml's judge_limits overrides."""
    from sforge.grading.judge_container import ContainerLimits

    return ContainerLimits(**(config.get("judge_limits") or {}))
