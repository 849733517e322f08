"""How a command runs what it must make: the Snakemake settings (`Execution`), one call
into Snakemake (`run_workflow`), the start-of-command sweep, and progress notes (`say`).

Fast paths elsewhere in sforge.commands answer from the same targets the Snakefile
declares without starting Snakemake when nothing needs making: its import alone costs
~1 s here. Progress notes go to stderr; outcomes are returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sforge.core.errors import InfrastructureError
from sforge.evals.grade import sweep_orphans
from sforge.workflow.snakemake import Run, run


@dataclass(frozen=True)
class Execution:
    """How to run Snakemake when something must be made."""
    jobs: int = 1
    profile: str | None = None
    verbose: int = 0  # 1: a line per finished judge or image; 2: Snakemake's job log too


def run_workflow(config: dict[str, Any], targets: list, ex: Execution, *,
                 quiet: bool = False, progress: Any = None, force: bool = False,
                 push: bool = False) -> bool:
    """Make `targets` with Snakemake; this run's flags go in its own config (a Pipeline
    cached for an earlier run never carries them)."""
    config = dict(config, force=force, push=push)
    return run(Run(targets=[str(t) for t in targets], config=config, cores=ex.jobs or 1,
                   profile=ex.profile, quiet=quiet, verbose=ex.verbose, progress=progress))


def sweep() -> None:
    """Every command starts here, with or without work: remove judge containers whose owner
    died or whose deadline passed (never a live run's). Without a daemon there is nothing to
    sweep, and the command itself says whether it needs one."""
    try:
        sweep_orphans()
    except InfrastructureError:
        return
