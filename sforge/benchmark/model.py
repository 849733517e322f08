"""The benchmark and task model: what task.toml and benchmark.toml say, with defaults applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sforge.benchmark.house_rules import HouseRules
from sforge.core.errors import SforgeError


@dataclass(frozen=True)
class Blob:
    """A file kept out of git, known by its path and sha256."""
    path: str  # relative to the task directory, e.g. "judge/blobs/hidden.tar.gz"
    sha256: str


@dataclass(frozen=True)
class Environment:
    """task.toml's [environment]: the work container's base, cwd, network and limits."""
    base: str | None = None
    platform: str | None = None
    cwd: str = "/home/workspace"
    internet: bool = False
    cpus: float | None = None
    memory: str | None = None


# Submission metadata the judge sees as submitted unless [submission] keep_metadata narrows it:
# setuid/setgid/sticky bits, numeric owner and group, POSIX ACLs, user.* xattrs.
METADATA_KINDS = ("mode", "owner", "acl", "xattr")


@dataclass(frozen=True)
class SubmissionRules:
    """task.toml's [submission]: which paths are graded and what metadata is kept."""
    paths: tuple[str, ...] = (".",)
    exclude: tuple[str, ...] = ()
    keep_metadata: tuple[str, ...] = METADATA_KINDS


@dataclass(frozen=True)
class Judge:
    """task.toml's [judge]: the command and the judge container's limits."""
    cmd: str
    timeout_sec: float = 600
    internet: bool = False
    cpus: float = 1.0
    memory: str = "2g"


@dataclass(frozen=True)
class Score:
    """task.toml's [score]: the direction and the rescale table."""
    direction: str = "maximize"  # maximize | minimize
    rescale: dict[str, Any] | None = None


@dataclass(frozen=True)
class Reference:
    """How to get the task's reference solution (`sforge check --integrity` grades it): a
    stored archive, or a script run in the work image before cwd is packed (paths relative
    to the task directory)."""
    archive: str | None = None
    script: str | None = None


@dataclass(frozen=True)
class Task:
    """One task as task.toml says it, with defaults applied."""
    id: str
    dir: Path
    name: str
    version: str
    environment: Environment
    submission: SubmissionRules
    judge: Judge
    score: Score
    blobs: tuple[Blob, ...] = ()
    game: dict[str, Any] | None = None
    reference: Reference | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # free-form keys: category, status…

    @property
    def toml_path(self) -> Path:
        """The task's task.toml."""
        return self.dir / "task.toml"

    @property
    def category(self) -> str | None:
        """The `category` metadata as text, None when unset."""
        value = self.metadata.get("category")
        return str(value) if value is not None else None

    def judge_settings(self) -> dict[str, Any]:
        """The runtime settings an eval result depends on (part of the eval key)."""
        return {
            "cmd": self.judge.cmd,
            "timeout_sec": self.judge.timeout_sec,
            "cpus": self.judge.cpus,
            "memory": self.judge.memory,
            "internet": self.judge.internet,
            "cwd": self.environment.cwd,
            "paths": list(self.submission.paths),
            "exclude": list(self.submission.exclude),
            # only when narrowed, so the keys of every task that keeps the default stay put
            **({"keep_metadata": sorted(self.submission.keep_metadata)}
               if set(self.submission.keep_metadata) != set(METADATA_KINDS) else {}),
        }


@dataclass
class Benchmark:
    """A loaded benchmark: its tasks, bases, registry and blob URL, and the tasks that failed."""
    root: Path
    name: str
    registry: str | None = None
    blob_url: str | None = None
    bases: dict[str, Path] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    # One broken task never hides the others: its error is kept here instead.
    errors: list[Exception] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. an empty tasks/
    # Tasks whose `status` metadata is one of these are built and graded but left out of the
    # leaderboard ([leaderboard] exclude_status in benchmark.toml; sforge gives `status` no
    # meaning of its own).
    exclude_status: tuple[str, ...] = ()
    # `[check]`: the benchmark's own rules for `sforge check`, beyond the task format's
    house_rules: HouseRules = field(default_factory=HouseRules)
    # A string that must appear nowhere in a work image (`sforge check --integrity`): put it
    # in the hidden files, and a copy that leaks into what agents see is found.
    canary: str | None = None

    def excluded(self, task: Task) -> bool:
        """Whether the task's `status` keeps it off the leaderboard."""
        status = task.metadata.get("status")
        return status is not None and str(status) in self.exclude_status

    @property
    def ranked_tasks(self) -> dict[str, Task]:
        """The tasks the leaderboard averages over (all but the excluded statuses)."""
        return {i: t for i, t in self.tasks.items() if not self.excluded(t)}

    def select(self, ids: list[str] | None) -> list[Task]:
        """The tasks of `ids` that exist (every task when none is given)."""
        if not ids:
            return list(self.tasks.values())
        return [self.tasks[i] for i in ids if i in self.tasks]

    def require(self, ids: list[str] | None) -> list[Task]:
        """The tasks of `ids` (every task when none is given). An id that names no task
        directory, loaded or broken, is an SforgeError: a typo never selects nothing. A
        broken task is left out, as in `select`; its error is in `errors`."""
        if ids:
            broken = {getattr(e, "task", None) for e in self.errors}
            missing = [i for i in ids if i not in self.tasks and i not in broken]
            if missing:
                raise SforgeError(f"unknown task(s): {', '.join(missing)} "
                                  f"(see `sforge list -b {self.root}`)")
        return self.select(ids)
