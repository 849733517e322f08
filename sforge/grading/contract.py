"""The grading contract's parts that every grader shares: the task as judged (with an
override), and the archive and container limits from the configuration, with the part of
them every eval key holds (`key_limits`).

`sforge eval`, the Snakemake rule, the judge service and tools/judge_local.py all grade
through these, so the same archive under the same settings gets the same key and the same
limits everywhere. The one grading function that every path calls, `grade`, builds on them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from sforge.benchmark.model import Task
from sforge.core.errors import SforgeError
from sforge.core.units import parse_memory
from sforge.grading.archive_limits import ArchiveLimits
from sforge.grading.judge_container import ContainerLimits


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
    return ArchiveLimits(**(config.get("archive_limits") or {}))


def container_limits(config: dict[str, Any]) -> ContainerLimits:
    """ContainerLimits' own defaults, with what config.yaml's judge_limits overrides."""
    return ContainerLimits(**(config.get("judge_limits") or {}))


def key_limits(config: dict[str, Any]) -> dict[str, Any]:
    """What of config.yaml's archive_limits and judge_limits every eval key holds (see
    `limits_in_key`)."""
    return limits_in_key(archive_limits(config), container_limits(config))


def _canonical(name: str, value: Any) -> Any:
    """A limit as the key holds it: a size in bytes ('10g', '10G' and '10240m' are one)."""
    if name == "writable" and isinstance(value, str):
        try:
            return parse_memory(value)
        except ValueError:
            return value
    return value


def limits_in_key(archive: ArchiveLimits | None = None,
                  container: ContainerLimits | None = None) -> dict[str, Any]:
    """The limits a judge runs under that differ from sforge's defaults, as the eval key
    holds them: {"archive_limits": {...}, "judge_limits": {...}}, each section only when it
    differs and with only the fields that differ, sizes in bytes (sforge.grading.results sorts
    the keys). Every field of both can move a verdict (an archive refused over max_members or
    max_bytes, a build that cannot fork under pids, a judge that fills its writable layer),
    so a changed limit keys its results anew and no result graded under other limits is
    served. At the defaults this is empty and adds nothing to the key material. A field
    added to either dataclass that cannot change a verdict (a pure performance knob) is to
    be skipped in this loop, or it would re-grade results for nothing."""
    out: dict[str, Any] = {}
    for section, given, default in (("archive_limits", archive or ArchiveLimits(),
                                     ArchiveLimits()),
                                    ("judge_limits", container or ContainerLimits(),
                                     ContainerLimits())):
        changed = {}
        for f in dataclasses.fields(default):
            value = _canonical(f.name, getattr(given, f.name))
            if value != _canonical(f.name, getattr(default, f.name)):
                changed[f.name] = value
        if changed:
            out[section] = dict(sorted(changed.items()))
    return out
