"""A run's settings (`sforge run` flags, or config `run:` for plain Snakemake), and where its
products live: results/<bench>/runs/<run>/<task>/<repeat>/."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Task
from sforge.core.errors import SforgeError
from sforge.core.units import memory_mb
from sforge.runs.origin import check_api_url

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_TIMEOUT_S = 3600.0


def check_run_id(value: str) -> str:
    """A run id names a folder under results/<bench>/runs: never a path or a pattern."""
    if not RUN_ID.match(value):
        raise SforgeError(f"run id {value!r}: use letters, digits, '_', '.', '-' "
                          "(at most 64, starting with a letter or digit)")
    return value


@dataclass(frozen=True)
class RunSpec:
    """A run's settings, checked when made; None in a size field defers to the task's own."""
    id: str
    agent: str
    tasks: tuple[str, ...] = ()
    repeats: int = 1
    model: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    cpus: float | None = None        # None: the task's [environment] cpus
    memory: str | None = None        # None: the task's [environment] memory
    internet: bool | None = None     # None: the task's [environment] internet
    service: str | None = None       # None: each job starts its own judge service
    max_tokens: int | None = None
    max_cost: float | None = None
    max_resumes: int | None = None   # None: the agent definition's
    budget: int | None = None        # submissions per run (None: the service's default)
    cooldown_s: float | None = None
    script: str | None = None        # the script agent's script (absolute path)
    model_api: str | None = None     # another API for the agent (a local server, a gateway)
    source_name: str | None = None   # every repeat's source (None: run-<id>-<repeat>)

    def __post_init__(self) -> None:
        check_run_id(self.id)
        if self.timeout_s <= 0:
            raise SforgeError(f"--timeout {self.timeout_s}: expected seconds > 0")
        if self.repeats < 1:
            raise SforgeError(f"--repeat {self.repeats}: expected 1 or more")
        if self.model_api is not None:
            check_api_url(self.model_api)

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> RunSpec:
        """The settings from a config `run:` mapping; an unknown key is an error naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SforgeError(f"run settings: unknown key(s) {', '.join(unknown)}")
        values = dict(data)
        values["tasks"] = tuple(values.get("tasks") or ())
        return cls(**values)

    def as_config(self) -> dict[str, Any]:
        """The settings as a config `run:` mapping: `from_config(as_config())` gives them back."""
        out = asdict(self)
        out["tasks"] = list(self.tasks)
        return out

    def source(self, repeat: int) -> str:
        """Each repeat is its own source in the scores tables, unless the run names one
        (proof runs: one source per proof agent across tasks)."""
        return self.source_name or f"run-{self.id}-{repeat}"

    # the work container's size -------------------------------------------------------
    def cpus_for(self, task: Task) -> float | None:
        """The work container's cores for this task: the run's bound, else the task's."""
        return self.cpus if self.cpus is not None else task.environment.cpus

    def memory_for(self, task: Task) -> str | None:
        """The work container's memory for this task: the run's bound, else the task's."""
        return self.memory if self.memory is not None else task.environment.memory

    def internet_for(self, task: Task) -> bool:
        """Whether the work container has internet: the run's setting, else the task's."""
        return self.internet if self.internet is not None else task.environment.internet

    def threads_for(self, task: Task) -> int:
        """Snakemake threads for this task's job: its cores rounded up, at least 1."""
        return max(1, math.ceil(self.cpus_for(task) or 1))

    def mem_mb_for(self, task: Task) -> int:
        """Snakemake mem_mb for this task's job: its memory bound in MiB, 1024 when unbounded."""
        memory = self.memory_for(task)
        return memory_mb(memory) if memory else 1024

    def runtime_min(self) -> int:
        """Cluster wall clock: the agent's time, the final grading and a margin."""
        return math.ceil(self.timeout_s / 60) + 15


def run_dir(root: Path, run: str, task: str, repeat: int) -> Path:
    """One run's folder under the results directory `root` (Layout.run_dir)."""
    return Layout(root).run_dir(run, task, repeat)


def run_record(root: Path, run: str, task: str, repeat: int) -> Path:
    """run.json of one run (Layout.run_record)."""
    return Layout(root).run_record(run, task, repeat)


def spec_path(root: Path, run: str) -> Path:
    """The settings a run was made with (Layout.run_spec)."""
    return Layout(root).run_spec(run)
