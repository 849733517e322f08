"""The one module that talks to Snakemake. Its Python API moves between minor versions;
everything else in sforge calls `run` and stays put when it does.

Local runs use the in-process API (no second interpreter; `run:` jobs in threads). A
profile (SLURM, Kubernetes) is a Snakemake CLI concept, so `--profile` runs the CLI.

Snakemake settings live in one place, the workflow profile profiles/default/config.yaml:
plain `snakemake` and `--profile` runs load it themselves, and the in-process run reads
the same file here.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sforge.core.config import WORKFLOW_DIR
from sforge.core.console import HideChatter, no_color, say
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_text
from sforge.grading.capacity import machine_memory_mb

SNAKEFILE = WORKFLOW_DIR / "Snakefile"
JOBS_FAILED = "At least one job did not complete successfully."  # Snakemake's words
PROFILES = WORKFLOW_DIR / "profiles"
# The keys of the workflow profile this module maps onto the API's settings.
_PROFILE_KEYS = {"rerun-triggers", "force-use-threads", "scheduler", "keep-incomplete",
                 "ignore-incomplete", "nolock"}


@dataclass
class Run:
    """One Snakemake invocation: targets, config, cores, profile and how much it prints."""
    targets: list[str]
    config: dict[str, Any]
    cores: int = 1
    profile: str | None = None
    quiet: bool = False
    verbose: int = 0  # 2 and more: Snakemake's own job log
    # A logging.Handler for Snakemake's job events (sforge.core.console.JobProgress): it draws
    # the progress, and Snakemake's own progress chatter is hidden while it does.
    progress: Any = None


@functools.cache
def settings() -> dict[str, Any]:
    """profiles/default/config.yaml: rerun triggers, threads for `run:` jobs, scheduler."""
    path = PROFILES / "default" / "config.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    unknown = set(data) - _PROFILE_KEYS
    if unknown:  # a new setting must be mapped below, or the two run paths would differ
        raise SforgeError(f"{path}: sforge's in-process run does not apply "
                          f"{', '.join(sorted(unknown))}; map it in sforge/workflow/snakemake.py")
    return data


def run(job: Run) -> bool:
    """Make `job.targets`; True when every target was made."""
    if not SNAKEFILE.is_file():
        raise SforgeError(f"Snakefile not found at {SNAKEFILE}: the sforge installation is "
                          "incomplete (reinstall it)")
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

    profile = settings()
    # Default: progress only; quiet: nothing; -vv: Snakemake's log of every job.
    quiet = {Quietness.HOST} if job.verbose >= 2 else {Quietness.RULES, Quietness.HOST}
    if job.quiet:
        quiet |= {Quietness.PROGRESS}
    try:
        with SnakemakeApi(OutputSettings(quiet=quiet, nocolor=no_color())) as api:
            if job.progress is not None and not job.quiet:
                _attach(job.progress, hide_chatter=job.verbose < 2)
            # docker_builds: the Snakefile sets it from config (one setting for every path)
            wf = api.workflow(
                resource_settings=ResourceSettings(cores=job.cores,
                                                   resources={"mem_mb": machine_memory_mb()}),
                config_settings=ConfigSettings(config=job.config),
                storage_settings=StorageSettings(),
                snakefile=SNAKEFILE,
                workdir=Path(job.config["results"]).resolve(),
            )
            dag = wf.dag(DAGSettings(targets=set(job.targets),
                                     rerun_triggers=set(profile.get("rerun-triggers", ()))))
            dag.execute_workflow(
                execution_settings=ExecutionSettings(
                    keep_going=True, use_threads=bool(profile.get("force-use-threads")),
                    lock=not profile.get("nolock"),
                    keep_incomplete=bool(profile.get("keep-incomplete")),
                    ignore_incomplete=bool(profile.get("ignore-incomplete"))),
                scheduling_settings=SchedulingSettings(
                    scheduler=profile.get("scheduler", "greedy")),
                scheduler_settings=GreedySchedulerSettings(),
                greedy_scheduler_settings=GreedySchedulerSettings(),
            )
    except Exception as exc:  # Snakemake has already logged the failing jobs
        from snakemake.exceptions import WorkflowError

        if isinstance(exc, WorkflowError | SforgeError):
            # a progress that explains failed jobs has said why each failed
            if not (job.progress is not None and getattr(job.progress, "explains_failures",
                                                         False) and job.progress.failures
                    and job.verbose < 2 and str(exc) == JOBS_FAILED):
                say(str(exc))
            return False
        raise
    return True


def _attach(handler: Any, hide_chatter: bool) -> None:
    """Give Snakemake's job events to `handler` for this run (Snakemake's logger manager
    removes every handler when the run ends)."""
    from snakemake.logging import logger

    if hide_chatter:
        for h in logger.handlers:
            h.addFilter(HideChatter(job_errors=bool(getattr(handler, "explains_failures",
                                                            False))))
    logger.addHandler(handler)


def resolve_profile(name: str) -> Path | str:
    """A path (relative to the working directory), else a bare name of a directory under
    the repository's profiles/ (`--profile slurm`), else a name Snakemake looks up itself."""
    if Path(name).exists():
        return Path(name).resolve()
    if (PROFILES / name).is_dir():
        return PROFILES / name
    return name


def _run_cli(job: Run) -> bool:
    import hashlib

    # --config would turn nested values into strings; a config file keeps their types. It
    # lives under the results dir, which cluster jobs share.
    text = yaml.safe_dump(job.config, sort_keys=True)
    results = Path(job.config["results"]).resolve()
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    configfile = results / ".sforge" / f"config-{digest}.yaml"
    if not configfile.exists():
        atomic_write_text(configfile, text)
    assert job.profile is not None
    profile = resolve_profile(job.profile)
    # The workflow profile (profiles/default beside the Snakefile) is loaded by Snakemake.
    args = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE),
            "--directory", str(results), "--profile", str(profile),
            "--configfile", str(configfile), "--keep-going",
            *(["--nocolor"] if no_color() else []), *job.targets]
    # sforge's stdout holds what the command prints (one JSON object under --json)
    return subprocess.run(args, cwd=WORKFLOW_DIR, stdout=sys.stderr).returncode == 0
