"""The one module that talks to Snakemake. Its Python API moves between minor versions;
everything else in sforge calls `run` and stays put when it does.

Local runs use the in-process API (no second interpreter; `run:` jobs in threads). A
profile (SLURM, Kubernetes) is a Snakemake CLI concept, so `--profile` runs the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import REPO_ROOT
from .errors import SforgeError

SNAKEFILE = REPO_ROOT / "Snakefile"
RERUN_TRIGGERS = ("mtime", "input")  # never code/params: upgrading sforge rebuilds nothing
# Several sforge processes may work on one results directory (no Snakemake lock; per-key
# claims instead). Every product is written atomically, so Snakemake's "incomplete" markers,
# left by a process killed mid-job, mean nothing: never stop on them, never delete a file
# because of them (another process may have written it meanwhile).
SHARED_RESULTS = {"keep_incomplete": True, "ignore_incomplete": True}
SHARED_RESULTS_ARGS = ("--keep-incomplete", "--ignore-incomplete", "--nolock")


@dataclass
class Run:
    targets: list[str]
    config: dict[str, Any]
    cores: int = 1
    dryrun: bool = False
    keep_going: bool = True
    profile: str | None = None
    quiet: bool = False
    verbose: int = 0  # 2 and more: Snakemake's own job log
    extra_args: list[str] = field(default_factory=list)
    # A logging.Handler for Snakemake's job events (sforge.console.JobProgress): it draws
    # the progress, and Snakemake's own progress chatter is hidden while it does.
    progress: Any = None


def _memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)


def run(job: Run) -> bool:
    """Make `job.targets`; True when every target was made."""
    if not SNAKEFILE.is_file():
        raise SforgeError(f"Snakefile not found at {SNAKEFILE}: install sforge from its "
                          "repository (pip install -e .)")
    if job.profile:
        return _run_cli(job)
    return _run_api(job)


def _run_api(job: Run) -> bool:
    from snakemake.api import SnakemakeApi
    from snakemake.scheduling.greedy import SchedulerSettings as GreedySchedulerSettings
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        ExecutionSettings,
        OutputSettings,
        ResourceSettings,
        SchedulingSettings,
        StorageSettings,
    )

    # Default: progress only; quiet: nothing; -vv: Snakemake's log of every job.
    quiet = {Quietness.HOST} if job.verbose >= 2 else {Quietness.RULES, Quietness.HOST}
    if job.quiet:
        quiet |= {Quietness.PROGRESS}
    try:
        with SnakemakeApi(OutputSettings(quiet=quiet, dryrun=job.dryrun)) as api:
            if job.progress is not None and not job.quiet:
                _attach(job.progress, hide_chatter=job.verbose < 2)
            wf = api.workflow(
                resource_settings=ResourceSettings(
                    cores=job.cores, resources={"mem_mb": _memory_mb(), "docker_builds": 2}),
                config_settings=ConfigSettings(config=job.config),
                storage_settings=StorageSettings(),
                snakefile=SNAKEFILE,
                workdir=Path(job.config["results"]).resolve(),
            )
            dag = wf.dag(DAGSettings(targets=set(job.targets),
                                     rerun_triggers=set(RERUN_TRIGGERS)))
            dag.execute_workflow(
                pseudo_executor="dryrun" if job.dryrun else None,
                execution_settings=ExecutionSettings(keep_going=job.keep_going,
                                                     use_threads=True, lock=False,
                                                     **SHARED_RESULTS),
                # the ILP scheduler starts a solver process per round: ~0.2 s a judge here
                scheduling_settings=SchedulingSettings(scheduler="greedy"),
                scheduler_settings=GreedySchedulerSettings(),
                greedy_scheduler_settings=GreedySchedulerSettings(),
            )
    except Exception as exc:  # Snakemake has already logged the failing jobs
        from snakemake.exceptions import WorkflowError

        if isinstance(exc, WorkflowError | SforgeError):
            print(f"sforge: {exc}", file=sys.stderr)
            return False
        raise
    return True


def _attach(handler: Any, hide_chatter: bool) -> None:
    """Give Snakemake's job events to `handler` for this run (Snakemake's logger manager
    removes every handler when the run ends)."""
    from snakemake.logging import logger

    from .console import HideChatter

    if hide_chatter:
        for h in logger.handlers:
            h.addFilter(HideChatter())
    logger.addHandler(handler)


def _run_cli(job: Run) -> bool:
    import hashlib

    import yaml

    from .fileio import atomic_write_text

    # --config would turn nested values into strings; a config file keeps their types. It
    # lives under the results dir, which cluster jobs share.
    text = yaml.safe_dump(job.config, sort_keys=True)
    results = Path(job.config["results"]).resolve()
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    configfile = results / ".sforge" / f"config-{digest}.yaml"
    if not configfile.exists():
        atomic_write_text(configfile, text)
    profile = Path(job.profile).resolve() if Path(job.profile).exists() else job.profile
    if not Path(job.profile).exists() and (REPO_ROOT / "profiles" / job.profile).is_dir():
        profile = REPO_ROOT / "profiles" / job.profile  # a bare name: --profile slurm
    args = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE),
            "--directory", str(results), "--profile", str(profile),
            "--rerun-triggers", *RERUN_TRIGGERS, "--configfile", str(configfile),
            *SHARED_RESULTS_ARGS]
    if job.keep_going:
        args.append("--keep-going")
    if job.dryrun:
        args.append("--dry-run")
    args += job.extra_args + list(job.targets)
    return subprocess.run(args, cwd=REPO_ROOT).returncode == 0
