"""What `sforge check --repeat` does: judge each task's reference archive several times in
fresh containers and say whether the verdicts agree (a grader that passes by chance)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sforge.commands.execution import Execution, sweep
from sforge.commands.images import ensure_judge
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
        return len({(v, s) for v, s, _ in self.verdicts}) > 1


def repeat_references(pipe: Pipeline, ids: list[str] | None, times: int,
                      ex: Execution) -> tuple[list[RepeatOutcome], list[str]]:
    """Judge each selected task's reference archive(s) (source "reference" in the
    submissions) `times` times in fresh containers; nothing is stored as a result. A grader
    whose verdicts differ passes or fails by chance (timing, randomness, network).
    → outcomes, and the tasks that have no reference to judge."""
    from sforge.containers.docker import engine
    from sforge.grading.contract import archive_limits, container_limits
    from sforge.grading.judge import run_judge

    outcomes: list[RepeatOutcome] = []
    tasks = pipe.tasks(ids)
    refs = {t.id: [s for s in pipe.submissions() if s.task == t.id
                   and s.source == REFERENCE_SOURCE] for t in tasks}
    missing = [t for t, subs in refs.items() if not subs]
    if any(refs.values()):
        sweep()
    limits, bounds = archive_limits(pipe.config), container_limits(pipe.config)
    for task in tasks:
        if not refs[task.id]:
            continue
        ensure_judge(pipe, task.id, ex)
        tag = pipe.refs[task.id]["judge"].tag
        for sub in refs[task.id]:
            verdicts = []
            for i in range(times):
                log = pipe.layout.root / "check" / "repeat" / task.id / f"{sub.sha256[:12]}-{i}.log"
                r = run_judge(engine(), tag, task, sub.path, limits=limits, log_path=log,
                              container_limits=bounds, submission=sub.sha256)
                verdicts.append((r.valid, r.score, r.reason or r.summary))
            outcomes.append(RepeatOutcome(task.id, sub.path, verdicts))
    return outcomes, missing
