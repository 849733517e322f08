"""`sforge run`, `sforge runs` and `sforge agents`: their parsers, calling the run machinery
(sforge.runs) and printing. Imported only when the command line names one of them."""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sforge.benchmark.layout import Layout
from sforge.cli.common import (
    AddParser,
    Subcommands,
    add_command,
    add_jobs_options,
    config_from,
    execution_from,
    pipeline_from,
)
from sforge.core.clock import now_iso
from sforge.core.console import say
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_json, read_json
from sforge.runs import COMMANDS
from sforge.runs.columns import record_state, shorten_error, usage_columns
from sforge.runs.spec import RunSpec, check_run_id, spec_path

if TYPE_CHECKING:
    from sforge.plan.pipeline import Pipeline

RUN_HELP = """\
Run an agent on tasks: one Snakemake target per (run, task, repeat),
<results>/<bench>/runs/<run>/<task>/<repeat>/run.json, made in the task's work container
with the agent's bundle mounted read-only. Every submission (and the final workspace) is
graded by the judge service: --service URL shares one, else one is started for this command
and stopped at the end. A finished run is never redone; Ctrl-C grades each run's final
workspace and records the attempt as interrupted (Ctrl-C again skips that), and running
the same command again starts those runs afresh.

agents: claude-code (ANTHROPIC_API_KEY), codex (OPENAI_API_KEY), script (--script FILE),
oracle (the task's [reference], then submit), nop (submits the untouched workspace).
The key stays on the host: the container reaches the model API only through sforge's proxy,
which forwards to that one API and nothing else. Without the key a run is refused, unless
--model-api URL points the agent at another API that speaks its protocol (a local
Anthropic- or OpenAI-compatible server, a company gateway): the proxy, on this host, then
forwards there only, adding the key if it is set. A run whose model calls all fail (5 in a
row, none ever succeeding: run_model_failures in config.yaml) stops at once, is recorded as
failed with the API's status and message, and the command exits 1.
"""


def _spec_from_args(args: argparse.Namespace, config: dict[str, Any],
                    tasks: list[str]) -> RunSpec:
    run_id = args.run_id or f"{args.agent}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    script = str(Path(args.script).resolve()) if args.script else None
    return RunSpec(
        id=run_id, agent=args.agent, tasks=tuple(tasks), repeats=args.repeat,
        model=args.model, timeout_s=float(args.timeout or config.get("run_timeout_s", 3600)),
        cpus=args.cpus, memory=args.memory, internet=args.internet, service=args.service,
        max_tokens=args.max_tokens, max_cost=args.max_cost, max_resumes=args.max_resumes,
        budget=args.budget, cooldown_s=args.cooldown, script=script, model_api=args.model_api)


def _settled(spec: RunSpec) -> dict[str, Any]:
    """What a run id stands for: its settings less the task list and where the service is."""
    out = spec.as_config()
    for key in ("tasks", "repeats", "service"):
        out.pop(key)
    return out


def save_spec(root: Path, spec: RunSpec) -> RunSpec:
    """spec.json names the run's settings; the same id with other settings is refused."""
    path = spec_path(root, spec.id)
    stored = spec.as_config()
    stored["service"] = None
    if path.is_file():
        old = RunSpec.from_config(read_json(path))
        if _settled(old) != _settled(spec):
            diff = sorted(k for k, v in _settled(spec).items() if _settled(old).get(k) != v)
            raise SforgeError(f"run {spec.id} was started with other settings ({', '.join(diff)}"
                              f" differ; see {path}): use a new --run-id")
        tasks = tuple(dict.fromkeys([*old.tasks, *spec.tasks]))
        stored.update(tasks=list(tasks), repeats=max(old.repeats, spec.repeats))
    atomic_write_json(path, stored)
    return spec


def cmd_run(args: argparse.Namespace) -> int:
    """Make the runs that are not done (a judge service started when none is given) and
    print the run table."""
    from sforge.runs.agents import load_agent  # function-level: buys start-up time
    from sforge.runs.service import started_service
    from sforge.runs.signals import install_signal_handlers
    from sforge.runs.targets import run_targets

    config = config_from(args)
    if not args.task:
        raise SforgeError("give at least one --task ID")
    agent = load_agent(args.agent)
    if agent.script and not args.script:
        raise SforgeError(f"agent {agent.name} runs a script: give --script FILE")
    agent.require_key(args.model_api)
    spec = _spec_from_args(args, config, args.task)
    config["run"] = spec.as_config()
    pipe = pipeline_from(config)
    pipe.config["run"] = spec.as_config()
    tasks = pipe.tasks(list(spec.tasks))  # unknown ids: a clear error
    if agent.reference:  # the oracle: a task without a usable [reference] is refused now
        from sforge.runs.reference import reference_files  # function-level: start-up time

        for task in tasks:
            reference_files(task)
    save_spec(pipe.layout.root, spec)
    targets = run_targets(pipe, spec)
    missing = [t for t in targets if not t.exists()]
    if not missing:
        print(f"run {spec.id}: all {len(targets)} run(s) done; nothing to make")
        return _print_runs(pipe, spec.id, args)
    install_signal_handlers()
    ok = False
    if spec.service:
        ok = _make(args, config, pipe, spec, missing)
    else:
        port = 0 if args.profile else None  # cluster jobs need a TCP address
        with started_service(pipe, port=port) as svc:
            say(f"judge service at {svc.url}")
            ok = _make(args, config, pipe, replace(spec, service=svc.url), missing)
    code = _print_runs(pipe, spec.id, args)
    return 0 if ok else (code or 1)


def _make(args: argparse.Namespace, config: dict[str, Any], pipe: Pipeline, spec: RunSpec,
          targets: list[Path]) -> bool:
    config = dict(config, run=spec.as_config())
    pipe.config["run"] = spec.as_config()
    return make_in_thread(config, targets, args)


def make_in_thread(config: dict[str, Any], targets: list[Path],
                   args: argparse.Namespace) -> bool:
    """Snakemake in a worker thread: the main thread keeps sforge's SIGINT/SIGTERM handlers
    (Snakemake's scheduler would take SIGTERM over, and a KeyboardInterrupt would leave the
    run threads working), so every run stops gracefully and grades its final workspace."""
    from sforge.commands.execution import run_workflow  # function-level: start-up time

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["ok"] = run_workflow(config, targets, execution_from(args))
        except BaseException as exc:  # re-raised in the main thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="sforge-snakemake", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
    if "error" in box:
        raise box["error"]
    return bool(box.get("ok"))


# sforge runs -----------------------------------------------------------------------------
def _alive(info: dict[str, Any]) -> bool:
    if info.get("host") != socket.gethostname():
        return True  # another machine's: trust the marker
    try:
        os.kill(int(info.get("pid", 0)), 0)
    except (OSError, ValueError):
        return False
    return True


def list_runs(root: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every (run, task, repeat) under results/<bench>/runs with its state."""
    rows = []
    for folder in sorted(Layout(root).runs.glob(f"{run_id or '*'}/*/*")):
        if not folder.is_dir() or not folder.name.isdigit():
            continue
        run, task = folder.parent.parent.name, folder.parent.name
        record: dict[str, Any] = {}
        state = "pending"
        attempts = sorted(folder.glob("attempt-*.json"),
                          key=lambda p: int(p.stem.split("-")[1]))
        running = folder / "running.json"
        if (folder / "run.json").is_file():
            record, state = read_json(folder / "run.json"), "done"
        elif running.is_file() and _alive(read_json(running)):
            record, state = read_json(running), "running"
        elif attempts:
            record = read_json(attempts[-1])
            state = record_state(record, "interrupted")  # or failed
        elapsed = record.get("elapsed_s")
        if state == "running" and record.get("started_at"):
            started = datetime.fromisoformat(record["started_at"])
            elapsed = round((datetime.now(UTC) - started).total_seconds(), 1)
        rows.append({"run": run, "task": task, "repeat": int(folder.name), "state": state,
                     "agent": record.get("agent"), "best": record.get("best_score"),
                     "rescaled": record.get("best_rescaled"), "rounds": record.get("rounds"),
                     **usage_columns(record),
                     "elapsed_s": elapsed, "attempts": len(attempts),
                     "stopped_by": record.get("stopped_by"), "error": record.get("error")})
    return rows


def _print_runs(pipe: Pipeline, run_id: str | None, args: argparse.Namespace) -> int:
    rows = list_runs(pipe.layout.root, run_id)
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
        return 0
    from tabulate import tabulate  # function-level: buys start-up time

    print(tabulate([shorten_error(r) for r in rows], headers="keys", tablefmt="simple")
          if rows else "(no runs)")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """Print the runs' table, or with --cancel ask a run's jobs to stop."""

    for given in (args.cancel, args.run):
        if given is not None:
            check_run_id(given)
    pipe = pipeline_from(config_from(args))
    if args.cancel:
        return _cancel(pipe, args.cancel)
    return _print_runs(pipe, args.run, args)


def _cancel(pipe: Pipeline, run_id: str) -> int:
    """Ask a run's jobs to stop: they grade the final workspace and record run.json with
    stopped_by=cancelled (so it is not redone)."""
    folders = [f for f in sorted((pipe.layout.runs / run_id).glob("*/*"))
               if f.is_dir() and not (f / "run.json").exists()]
    if not (pipe.layout.runs / run_id).is_dir():
        raise SforgeError(f"no run {run_id} under {pipe.layout.root / 'runs'}")
    for folder in folders:
        atomic_write_json(folder / "cancel", {"at": now_iso("auto")})
    print(f"run {run_id}: cancel asked of {len(folders)} unfinished run(s)")
    return 0


# sforge agents ---------------------------------------------------------------------------
def cmd_agents(args: argparse.Namespace) -> int:
    """List the agents and whether their bundles are prepared; --prepare prepares them."""
    from sforge.runs.agents import available, load_agent  # function-level: start-up time
    from sforge.runs.bundle import bundle_digest, bundle_dir, ensure_bundle

    for name in args.prepare or []:
        path = ensure_bundle(load_agent(name))
        print(f"{name}: bundle ready at {path}")
    if args.prepare:
        return 0
    rows = []
    for name in available():
        agent = load_agent(name)
        if agent.script:
            state = "per run (--script)"
        else:
            try:
                state = "prepared" if bundle_dir(agent, bundle_digest(agent)).is_dir() \
                    else "not prepared"
            except SforgeError as exc:
                state = f"cannot prepare: {exc}"
        api = agent.model_api
        rows.append({"agent": name, "description": agent.description,
                     "key": api.key_env if api else "-", "bundle": state})
    from tabulate import tabulate  # function-level: buys start-up time

    print(tabulate(rows, headers="keys", tablefmt="simple"))
    return 0


# parsers ----------------------------------------------------------------------------------
def add_run(sub: Subcommands) -> None:
    """`sforge run`'s parser."""
    p = add_command(sub, "run", cmd_run, COMMANDS["run"], RUN_HELP)
    p.add_argument("--task", "-t", action="append", metavar="ID", help="task id (repeatable)")
    p.add_argument("--agent", "-a", required=True, metavar="NAME",
                   help="agents/<NAME>/: claude-code, codex, script, oracle, nop")
    p.add_argument("--model", "-m", help="model name (default: the agent's default_model)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="the agent's wall clock (default: config run_timeout_s, 3600)")
    p.add_argument("--run-id", metavar="R", help="run id (default: <agent>-<UTC time>)")
    p.add_argument("--repeat", type=int, default=1, metavar="K",
                   help="K independent runs per task, each its own source (default 1); "
                   "`sforge report` pools them per agent and model: mean with a 95%% "
                   "interval, best-of-K and pass@k (leaderboard_repeats.csv)")
    add_jobs_options(p)
    p.add_argument("--cpus", type=float, help="work container CPUs (default: the task's)")
    p.add_argument("--memory", help="work container memory, e.g. 4g (default: the task's)")
    net = p.add_mutually_exclusive_group()
    net.add_argument("--internet", dest="internet", action="store_true", default=None,
                     help="give the work container the internet")
    net.add_argument("--no-internet", dest="internet", action="store_false",
                     help="no network but sforge's sockets (default: the task's setting)")
    p.add_argument("--service", metavar="URL",
                   help="judge service to use (http://host:port or unix:///path); "
                        "default: start one for this command")
    p.add_argument("--max-tokens", type=int, metavar="N", help="stop a run at N model tokens")
    p.add_argument("--max-cost", type=float, metavar="USD",
                   help="stop a run at this model cost (prices in agents/<name>/agent.toml)")
    p.add_argument("--max-resumes", type=int, metavar="N",
                   help="restart an agent that exits early at most N times (default: agent's)")
    p.add_argument("--budget", type=int, metavar="N", help="submissions allowed per run")
    p.add_argument("--cooldown", type=float, metavar="S", help="seconds between submissions")
    p.add_argument("--script", metavar="FILE", help="the script agent's /bin/sh script")
    p.add_argument("--model-api", metavar="URL",
                   help="send the agent's model calls to this API instead of its own, "
                        "http(s)://host[:port][/path] (a local server, a gateway); seen "
                        "from this host, the only origin the proxy forwards to")
    p.add_argument("--json", action="store_true", help="print the run table as JSON")


def add_runs(sub: Subcommands) -> None:
    """`sforge runs`'s parser."""
    p = add_command(sub, "runs", cmd_runs, COMMANDS["runs"])
    p.add_argument("--run", metavar="R", help="only this run")
    p.add_argument("--cancel", metavar="R", help="stop run R's unfinished jobs")
    p.add_argument("--json", action="store_true", help="print JSON")


def add_agents(sub: Subcommands) -> None:
    """`sforge agents`'s parser."""
    p = add_command(sub, "agents", cmd_agents, COMMANDS["agents"])
    p.add_argument("--prepare", nargs="+", metavar="NAME",
                   help="download and assemble these agents' bundles (once per machine)")


PARSERS: dict[str, AddParser] = {"run": add_run, "runs": add_runs, "agents": add_agents}
