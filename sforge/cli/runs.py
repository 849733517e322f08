"""`sforge run`, `sforge runs` and `sforge agents`: their parsers, calling the run machinery
(sforge.runs) and printing. Imported only when the command line names one of them."""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sforge.benchmark.layout import AGENT_LOG, attempt_files
from sforge.cli.common import (
    AddParser,
    Subcommands,
    add_command,
    add_jobs_options,
    add_json_option,
    config_from,
    execution_from,
    memory_size,
    non_negative_float,
    non_negative_int,
    pipeline_from,
    positive_float,
    positive_int,
    print_json,
)
from sforge.cli.exits import INTERRUPTED, OK, failed_jobs_code
from sforge.core.clock import now_iso
from sforge.core.console import say
from sforge.core.errors import SforgeError, UsageError
from sforge.core.fileio import atomic_write_json, read_json
from sforge.runs import COMMANDS
from sforge.runs.spec import RunSpec, check_run_id, run_record, spec_path
from sforge.scores.run_listing import list_runs, record_state, shorten_error

if TYPE_CHECKING:
    from sforge.core.console import Verdict
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
failed with the API's status and message, and the command exits 1. A run stopped by the
Docker daemon or the judge service (unreachable) is recorded as failed with that error, and
the command exits 4 (infrastructure: run it again later) when that is why every run failed
(known of the jobs it ran itself: under --profile a failed job makes it exit 1).
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
    from sforge.runs.signals import STOP, install_signal_handlers
    from sforge.runs.targets import job_failure, run_targets

    if not args.task:
        raise UsageError("run: give at least one --task ID")
    config = config_from(args)
    agent = load_agent(args.agent)
    if agent.script and not args.script:
        raise UsageError(f"run: agent {agent.name} runs a script: give --script FILE")
    if args.script and not Path(args.script).is_file():  # said here, not in a Snakemake job
        raise SforgeError(f"--script {args.script}: no such file")
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
        print(f"run {spec.id}: all {len(targets)} run(s) done; nothing to make",
              file=sys.stderr if args.json else sys.stdout)
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
    _print_runs(pipe, spec.id, args)
    if STOP.is_set():  # Ctrl-C or SIGTERM: the runs are interrupted, not failed
        return INTERRUPTED
    if ok:
        return OK
    return failed_jobs_code([job_failure(spec.id, task, repeat)
                             for task in spec.tasks for repeat in range(spec.repeats)
                             if not run_record(pipe.layout.root, spec.id, task, repeat).exists()])


def _make(args: argparse.Namespace, config: dict[str, Any], pipe: Pipeline, spec: RunSpec,
          targets: list[Path]) -> bool:
    config = dict(config, run=spec.as_config())
    pipe.config["run"] = spec.as_config()
    return make_in_thread(config, targets, args, pipe.layout.root)


def make_in_thread(config: dict[str, Any], targets: list[Path],
                   args: argparse.Namespace, root: Path) -> bool:
    """Snakemake in a worker thread: the main thread keeps sforge's SIGINT/SIGTERM handlers
    (Snakemake's scheduler would take SIGTERM over, and a KeyboardInterrupt would leave the
    run threads working), so every run stops gracefully and grades its final workspace."""
    from sforge.commands.execution import run_workflow  # function-level: start-up time
    from sforge.core.console import JobProgress

    box: dict[str, Any] = {}

    ex = execution_from(args)
    progress = JobProgress("run", lambda rule, wc: run_verdict(root, rule, wc),
                           verbose=ex.verbose >= 1, explains_failures=True)

    def work() -> None:
        try:
            box["ok"] = run_workflow(config, targets, ex, progress=progress)
        except BaseException as exc:  # re-raised in the main thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="sforge-snakemake", daemon=True)
    with progress:  # sforge's progress line, not Snakemake's chatter (as `grade` shows)
        thread.start()
        while thread.is_alive():
            thread.join(0.5)
    if "error" in box:
        raise box["error"]
    return bool(box.get("ok"))


def run_verdict(root: Path, rule: str, wildcards: dict[str, str]) -> Verdict | None:
    """What a finished job of `sforge run` did, in one line: a run's task, id, repeat and
    state with its best score; an agent's bundle or an image made."""
    from sforge.core.console import Verdict  # function-level: start-up time (logging)

    if rule == "agent_run":
        run, task, repeat = (wildcards.get(k, "?") for k in ("run", "task", "repeat"))
        folder = root / "runs" / run / task / repeat
        if wildcards.get("failed") == "yes":
            return failed_run_verdict(folder, run, task, repeat, wildcards.get("reason", ""))
        try:
            record = read_json(folder / "run.json")
        except (OSError, ValueError) as exc:
            return Verdict(f"{task}  {run}/{repeat}  record unreadable: {exc}", True)
        state = record_state(record, "done")
        best = record.get("best_score")
        line = f"{task}  {run}/{repeat}  {state}  best {'-' if best is None else best}"
        if record.get("error"):
            line += f"  {shorten_error({'error': record['error']})['error']}"
        return Verdict(line, state != "done")
    if rule == "agent_bundle":
        return Verdict(f"agent bundle {wildcards.get('agent', '?')} ready", False)
    if rule in ("base_image", "task_image"):
        kind, name = wildcards.get("kind", "base"), wildcards.get("task") or wildcards.get("name")
        state = "FAILED (see its build log)" if wildcards.get("failed") == "yes" else "ready"
        return Verdict(f"image {kind} {name} ({wildcards.get('digest', '?')}) {state}", False)
    return None


def failed_run_verdict(folder: Path, run: str, task: str, repeat: str,
                       reason: str) -> Verdict:
    """The one line of a run job that did not make its record: interrupted (Ctrl-C,
    SIGTERM: what running it again does), or FAILED with why (the model API's error, or the
    exception that stopped it; `reason`: Snakemake's report of it, when the job ran in
    another process)."""
    from sforge.core.console import Verdict  # function-level: start-up time (logging)
    from sforge.runs.runner import RunFailed
    from sforge.runs.signals import Interrupted
    from sforge.runs.targets import job_failure

    where = f"{task}  {run}/{repeat}"
    exc = job_failure(run, task, int(repeat)) if repeat.isdigit() else None
    if isinstance(exc, Interrupted):
        if exc.attempt is None:
            return Verdict(f"{where}  interrupted before it started; `sforge run` again "
                           "starts it", True)
        return Verdict(f"{where}  interrupted: attempt {exc.attempt} recorded (its "
                       "submissions kept); `sforge run` again starts it afresh", True)
    latest = latest_attempt(folder) if exc is None or isinstance(exc, RunFailed) else {}
    why = latest.get("error") if latest.get("state") == "failed" else None
    why = why or (str(exc) if exc is not None else reason) or "no reason given"
    log = folder / AGENT_LOG
    return Verdict(f"{where}  FAILED: {why}" + (f" (see {log})" if log.is_file() else ""),
                   True)


def latest_attempt(folder: Path) -> dict[str, Any]:
    """The run folder's latest attempt-<n>.json ({} when none can be read)."""
    found = attempt_files(folder)
    if not found:
        return {}
    try:
        data = read_json(found[-1][1])
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# sforge runs -----------------------------------------------------------------------------
def _print_runs(pipe: Pipeline, run_id: str | None, args: argparse.Namespace) -> int:
    rows = list_runs(pipe.layout.root, run_id)
    if getattr(args, "json", False):
        print_json({"runs": rows})
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
    for given in (args.cancel, args.run):
        if given is not None:
            _existing_run(pipe, given)
    if args.cancel:
        return _cancel(pipe, args.cancel, args)
    return _print_runs(pipe, args.run, args)


def _existing_run(pipe: Pipeline, run_id: str) -> Path:
    """A run's folder; a run id that names none is an input error (a typo lists nothing)."""
    folder = pipe.layout.runs / run_id
    if not folder.is_dir():
        raise SforgeError(f"no run {run_id} under {pipe.layout.root / 'runs'}")
    return folder


def _cancel(pipe: Pipeline, run_id: str, args: argparse.Namespace) -> int:
    """Ask a run's unfinished jobs to stop: every task × repeat of its spec.json (and every
    folder of it) without run.json gets a cancel file. A running job grades its final
    workspace, one that starts later does not start its agent; both record run.json with
    stopped_by=cancelled (so it is not redone)."""
    run = _existing_run(pipe, run_id)
    wanted = {f for f in run.glob("*/*") if f.is_dir() and f.name.isdigit()}
    path = spec_path(pipe.layout.root, run_id)
    if path.is_file():
        spec = RunSpec.from_config(read_json(path))
        wanted |= {pipe.layout.run_dir(run_id, t, r)
                   for t in spec.tasks for r in range(spec.repeats)}
    folders = sorted(f for f in wanted if not (f / "run.json").exists())
    for folder in folders:
        atomic_write_json(folder / "cancel", {"at": now_iso("auto")})
    if args.json:
        print_json({"run": run_id, "cancelled": [str(f) for f in folders]})
    else:
        print(f"run {run_id}: cancel asked of {len(folders)} unfinished run(s)")
    return 0


# sforge agents ---------------------------------------------------------------------------
def cmd_agents(args: argparse.Namespace) -> int:
    """List the agents and whether their bundles are prepared; --prepare prepares them."""
    from sforge.runs.agents import available, load_agent  # function-level: start-up time
    from sforge.runs.bundle import bundle_digest, bundle_dir, ensure_bundle

    prepared = {}
    for name in args.prepare or []:
        prepared[name] = str(ensure_bundle(load_agent(name)))
        if not args.json:
            print(f"{name}: bundle ready at {prepared[name]}")
    if args.prepare:
        if args.json:
            print_json({"prepared": prepared})
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
    if args.json:
        print_json({"agents": rows})
        return 0
    from tabulate import tabulate  # function-level: buys start-up time

    print(tabulate(rows, headers="keys", tablefmt="simple"))
    return 0


# parsers ----------------------------------------------------------------------------------
def add_run(sub: Subcommands) -> None:
    """`sforge run`'s parser."""
    p = add_command(sub, "run", cmd_run, COMMANDS["run"], RUN_HELP, examples=[
        "sforge run -a script -t number_guess "
        "--script edgebench/tasks/number_guess/players/reference.sh",
        "sforge run -a claude-code -t knapsack -t semver_ranges --repeat 3 -j 2",
        "sforge run -a codex -t knapsack --model-api http://127.0.0.1:8000/v1 --json"])
    p.add_argument("--task", "-t", action="append", metavar="ID", help="task id (repeatable)")
    p.add_argument("--agent", "-a", required=True, metavar="NAME",
                   help="agents/<NAME>/: claude-code, codex, script, oracle, nop")
    p.add_argument("--model", "-m", help="model name (default: the agent's default_model)")
    p.add_argument("--timeout", type=positive_float, metavar="S",
                   help="the agent's wall clock (default: config run_timeout_s, 3600)")
    p.add_argument("--run-id", metavar="R", help="run id (default: <agent>-<UTC time>)")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="K",
                   help="K independent runs per task, each its own source (default 1); "
                   "`sforge report` pools them per agent and model: mean with a 95%% "
                   "interval, best-of-K and pass@k (leaderboard_repeats.csv)")
    add_jobs_options(p)
    p.add_argument("--cpus", type=positive_float,
                   help="work container CPUs (default: the task's)")
    p.add_argument("--memory", type=memory_size,
                   help="work container memory, e.g. 4g (default: the task's)")
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
    p.add_argument("--max-resumes", type=non_negative_int, metavar="N",
                   help="restart an agent that exits early at most N times (default: agent's)")
    p.add_argument("--budget", type=non_negative_int, metavar="N",
                   help="submissions allowed per run")
    p.add_argument("--cooldown", type=non_negative_float, metavar="S",
                   help="seconds between submissions")
    p.add_argument("--script", metavar="FILE", help="the script agent's /bin/sh script")
    p.add_argument("--model-api", metavar="URL",
                   help="send the agent's model calls to this API instead of its own, "
                        "http(s)://host[:port][/path] (a local server, a gateway); seen "
                        "from this host, the only origin the proxy forwards to")
    add_json_option(p, "the run table ({\"runs\": [...]})")


def add_runs(sub: Subcommands) -> None:
    """`sforge runs`'s parser."""
    p = add_command(sub, "runs", cmd_runs, COMMANDS["runs"], examples=[
        "sforge runs", "sforge runs --run r1 --json | jq -r '.runs[].state'",
        "sforge runs --cancel r1"])
    p.add_argument("--run", metavar="R", help="only this run")
    p.add_argument("--cancel", metavar="R",
                   help="stop run R's unfinished jobs, running or not started yet")
    add_json_option(p, "the runs ({\"runs\": [...]}; with --cancel what was asked to stop)")


def add_agents(sub: Subcommands) -> None:
    """`sforge agents`'s parser."""
    p = add_command(sub, "agents", cmd_agents, COMMANDS["agents"], examples=[
        "sforge agents", "sforge agents --prepare claude-code codex"])
    p.add_argument("--prepare", nargs="+", metavar="NAME",
                   help="download and assemble these agents' bundles (once per machine)")
    add_json_option(p, "the agents ({\"agents\": [...]})")


PARSERS: dict[str, AddParser] = {"run": add_run, "runs": add_runs, "agents": add_agents}
