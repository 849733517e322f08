"""What `sforge check --repeat` does: judge each task's reference archive several times in
fresh containers and say whether the verdicts agree (a grader that passes by chance)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sforge.benchmark.model import Task
from sforge.commands.execution import Execution, sweep
from sforge.commands.images import ensure_judge
from sforge.containers.docker import engine
from sforge.grading.contract import archive_limits, container_limits
from sforge.grading.judge import run_judge
from sforge.plan.pipeline import Pipeline

REFERENCE_SOURCE = "reference"


@dataclass
class RepeatOutcome:
    """A task's reference archive judged several times, and whether the verdicts agree."""
    task: str
    archive: Path
    verdicts: list[tuple[bool, float | None, str]]  # (valid, score, reason or summary)

    @property
    def differ(self) -> bool:
        """Whether the repeats disagree on validity or score (a flaky judge)."""
        return len({(v, s) for v, s, _ in self.verdicts}) > 1


def repeat_references(pipe: Pipeline, ids: list[str] | None, times: int,
                      ex: Execution) -> tuple[list[RepeatOutcome], list[str]]:
    """Judge each selected task's reference archive(s) (source "reference" in the
    submissions) `times` times in fresh containers; nothing is stored as a result. A grader
    whose verdicts differ passes or fails by chance (timing, randomness, network).
    → outcomes, and the tasks that have no reference to judge."""
    outcomes: list[RepeatOutcome] = []
    tasks = pipe.tasks(ids)
    refs = {t.id: [s for s in pipe.submissions() if s.task == t.id
                   and s.source == REFERENCE_SOURCE] for t in tasks}
    missing = [t for t, subs in refs.items() if not subs]
    if any(refs.values()):
        sweep()
    for task in tasks:
        if not refs[task.id]:
            continue
        ensure_judge(pipe, task.id, ex)
        for sub in refs[task.id]:
            outcomes.append(judge_repeatedly(pipe, task, sub.path, sub.sha256, times))
    return outcomes, missing


def judge_repeatedly(pipe: Pipeline, task: Task, archive: Path, sha256: str,
                     times: int) -> RepeatOutcome:
    """Judge one archive `times` times in fresh containers (its judge image made); nothing
    is stored as a result, the logs go under <results>/check/repeat/."""
    limits, bounds = archive_limits(pipe.config), container_limits(pipe.config)
    tag = pipe.refs[task.id]["judge"].tag
    verdicts = []
    for i in range(times):
        log = pipe.layout.repeat_log(task.id, f"{sha256[:12]}-{i}.log")
        r = run_judge(engine(), tag, task, archive, limits=limits, log_path=log,
                      container_limits=bounds, submission=sha256)
        verdicts.append((r.valid, r.score, r.reason or r.summary))
    return RepeatOutcome(task.id, archive, verdicts)
