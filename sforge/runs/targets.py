"""The functions the run rules call (rules/runs.smk), and the run settings they read: the
config's `run:` entry when it names this run, else the spec.json `sforge run` wrote, so plain
Snakemake can re-make a run's targets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from sforge.core.errors import SforgeError
from sforge.core.fileio import read_json
from sforge.core.joblog import job_log
from sforge.runs.agents import load_agent
from sforge.runs.bundle import bundle_digest, write_bundle_sentinel
from sforge.runs.runner import run_target
from sforge.runs.spec import RunSpec, run_record, spec_path


def run_spec(pipe, run_id: str) -> RunSpec:
    """The run's settings: config `run:` when it names this run, else its spec.json."""
    given = pipe.config.get("run")
    if given and given.get("id") == run_id:
        return RunSpec.from_config(given)
    path = spec_path(pipe.layout.root, run_id)
    if path.is_file():
        spec = RunSpec.from_config(read_json(path))
        shared = pipe.config.get("run_service")
        return replace(spec, service=shared) if shared and not spec.service else spec
    raise SforgeError(f"no settings for run {run_id!r}: start it with `sforge run --run-id "
                      f"{run_id} ...` or give config run: {{id: {run_id}, agent: ...}}")


def _script(spec: RunSpec) -> Path | None:
    return Path(spec.script) if spec.script else None


def bundle_sentinel(pipe, run_id: str) -> str:
    """The sentinel file of the bundle the run's agent needs (an input of each run job)."""
    spec = run_spec(pipe, run_id)
    agent = load_agent(spec.agent)
    return str(pipe.layout.agent_sentinel(agent.name, bundle_digest(agent, _script(spec))))


def _known_specs(pipe) -> list[RunSpec]:
    out = [RunSpec.from_config(pipe.config["run"])] if pipe.config.get("run") else []
    for path in sorted(pipe.layout.runs.glob("*/spec.json")):
        out.append(RunSpec.from_config(read_json(path)))
    return out


def make_bundle_target(pipe, agent_name: str, digest: str, output: str,
                       log: str | None = None) -> None:
    """Prepare the bundle whose sources hash to `digest` (for the script agent: the script
    of a run that asks for it); `log`: the rule's log file."""
    with job_log(log, f"agent bundle {agent_name} {digest}"):
        _make_bundle(pipe, agent_name, digest, output)


def _make_bundle(pipe, agent_name: str, digest: str, output: str) -> None:
    agent = load_agent(agent_name)
    scripts = [_script(s) for s in _known_specs(pipe) if s.agent == agent_name] \
        if agent.script else [None]
    for script in scripts:
        if bundle_digest(agent, script) == digest:
            write_bundle_sentinel(agent, Path(output), script)
            return
    raise SforgeError(f"agent {agent_name}: no run asks for bundle {digest} (its sources "
                      "changed since planning?); run again")


def run_threads(pipe, run_id: str, task_id: str) -> int:
    """Snakemake threads of one run job: the work container's cores, rounded up."""
    return run_spec(pipe, run_id).threads_for(pipe.bench.tasks[task_id])


def run_mem_mb(pipe, run_id: str, task_id: str) -> int:
    """Snakemake mem_mb of one run job: the work container's memory in MiB."""
    return run_spec(pipe, run_id).mem_mb_for(pipe.bench.tasks[task_id])


def run_runtime_min(pipe, run_id: str) -> int:
    """Snakemake runtime (minutes) of one run job, from the run's timeout."""
    return run_spec(pipe, run_id).runtime_min()


def run_targets(pipe, spec: RunSpec) -> list[Path]:
    """The record file of every (task, repeat) of the run: what `sforge run` asks for."""
    return [run_record(pipe.layout.root, spec.id, t, r)
            for t in spec.tasks for r in range(spec.repeats)]


# why a run job of this process failed, by (run, task, repeat): what `sforge run` says of it
_failures: dict[tuple[str, str, int], BaseException] = {}


def make_run_target(pipe, run_id: str, task_id: str, repeat: int) -> dict[str, Any]:
    """Run the agent on one task and repeat (the run rule's body); → the run's record. A
    job that fails keeps its exception for `job_failure` (and the job still fails)."""
    _failures.pop((run_id, task_id, repeat), None)
    try:
        return run_target(pipe, run_spec(pipe, run_id), task_id, repeat)
    except BaseException as exc:
        _failures[(run_id, task_id, repeat)] = exc
        raise


def job_failure(run_id: str, task_id: str, repeat: int) -> BaseException | None:
    """Why this process's last job of (run, task, repeat) failed, None when it did not
    (or ran elsewhere): Interrupted, RunFailed, or whatever stopped it."""
    return _failures.get((run_id, task_id, repeat))


__all__ = ["bundle_sentinel", "job_failure", "make_bundle_target", "make_run_target",
           "run_mem_mb", "run_runtime_min", "run_spec", "run_targets", "run_threads"]
