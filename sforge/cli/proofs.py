"""`sforge prove`: every task proven both ways, as Snakemake run targets (sforge.runs.proofs):
the oracle agent (the task's [reference]) must get full marks, the nop agent (the workspace
as shipped) must stay at the floor. Imported only when the command line names it."""

from __future__ import annotations

import argparse

from sforge.benchmark.verdicts import oracle_skipped
from sforge.cli.common import (
    AddParser,
    Subcommands,
    add_command,
    add_jobs_options,
    add_json_option,
    config_from,
    pipeline_from,
    print_json,
    report_broken,
)
from sforge.cli.runs import make_in_thread, save_spec
from sforge.core.console import say, warn
from sforge.core.errors import SforgeError
from sforge.runs import COMMANDS

PROVE_HELP = """\
Prove tasks both ways with agent runs: `oracle` runs the task's [reference] (task.toml: its
script in cwd, or its archive unpacked into cwd) and submits, and must get full marks;
`nop` submits the workspace as shipped, and must stay at the floor (rescaled 0, or invalid).
Each is a Snakemake target, results/<bench>/runs/<agent>-<hash>/<task>/0/run.json, whose
hash covers the task's work and judge images, its judge settings, score table and
reference, the agent and the grading contract: an unchanged task is not proven again.
Exit 1 when a task fails a proof (the report marks it on the task table and page) or does
not load; a task without [reference] gets the nop proof only, with a warning.
"""


def cmd_prove(args: argparse.Namespace) -> int:
    """Make the proof runs that are missing, then judge every task's proofs."""
    from sforge.runs.proofs import proof_specs, proof_target  # function-level: start-up
    from sforge.runs.service import started_service
    from sforge.runs.signals import install_signal_handlers
    from sforge.scores.proofs import read_proofs

    config = config_from(args)
    config.pop("run", None)  # each proof run's settings come from its spec.json
    pipe = pipeline_from(config)
    broken = report_broken(pipe)
    tasks = pipe.tasks(args.task)
    timeout = float(args.timeout or config.get("run_timeout_s", 3600))
    specs = proof_specs(pipe, tasks, timeout)
    for task in tasks:
        if skipped := oracle_skipped(task):
            warn(f"{task.toml_path}: {skipped}")
    for spec in specs:
        save_spec(pipe.layout.root, spec)
    missing = [t for t in (proof_target(pipe, s) for s in specs) if not t.exists()]
    ok = True
    if missing:
        install_signal_handlers()
        port = 0 if args.profile else None  # cluster jobs need a TCP address
        with started_service(pipe, port=port) as svc:  # one service for every proof run
            say(f"judge service at {svc.url}")
            ok = make_in_thread(dict(config, run_service=svc.url), missing, args,
                                pipe.layout.root)
    else:
        say(f"all {len(specs)} proof run(s) up to date; nothing to make")
    proofs = read_proofs(pipe.bench, pipe.layout.root)
    ids = {s.id for s in specs}
    rows, failed = [], 0
    for task in tasks:
        for agent, proof in sorted(proofs.get(task.id, {}).items()):
            if proof.run not in ids:  # an older proof of another state of the task
                continue
            failed += proof.ok is False
            rows.append({"task": task.id, "agent": agent, "ok": proof.ok, "run": proof.run,
                         "why": proof.why})
    if args.json:
        print_json({"ok": not (failed or broken or len(rows) < len(specs)), "proofs": rows,
                    "broken_tasks": broken})
    else:
        from tabulate import tabulate  # function-level: buys start-up time

        print(tabulate(rows, headers="keys", tablefmt="simple") if rows else "(no proofs)")
    if not ok:
        raise SforgeError("some proof runs could not be made (see above)")
    return 1 if failed or broken or len(rows) < len(specs) else 0


def add_prove(sub: Subcommands) -> None:
    """`sforge prove`'s parser."""
    p = add_command(sub, "prove", cmd_prove, COMMANDS["prove"], PROVE_HELP,
                    examples=["sforge prove -j 2", "sforge prove -t knapsack --json"])
    p.add_argument("--task", "-t", action="append", metavar="ID",
                   help="task id (repeatable; default: every task)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="each proof run's wall clock (default: config run_timeout_s, 3600)")
    add_jobs_options(p)
    add_json_option(p, "the proofs: task, agent, ok, why, run record")


PARSERS: dict[str, AddParser] = {"prove": add_prove}
