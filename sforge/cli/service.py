"""`sforge serve` and `sforge doctor`: their parsers; starting the judge service (in
sforge.service) and printing the host and node checks of sforge.commands.doctor."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from sforge.cli.common import (
    AddParser,
    Subcommands,
    add_command,
    add_jobs_options,
    add_json_option,
    config_from,
    execution_from,
    pipeline_from,
    port_number,
    positive_float,
    positive_int,
    print_json,
    report_broken,
)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the judge service until it is stopped."""
    from sforge.service.server import DEFAULT_PORT, Listen, serve  # function-level: start-up

    pipe = pipeline_from(config_from(args))
    report_broken(pipe)
    only_socket = args.socket and args.port is None and args.host is None
    listen = Listen(host=args.host or "127.0.0.1",
                    port=None if only_socket else (DEFAULT_PORT if args.port is None
                                                   else args.port),
                    socket=Path(args.socket).resolve() if args.socket else None)
    return serve(pipe, listen, max_concurrent=args.max_concurrent,
                 max_pending=args.max_pending, log_level="debug" if args.verbose else "info")


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print every check (a table, or JSON); exit 1 when one is to fix."""
    from sforge.commands.doctor import doctor, table  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    checks = doctor(pipe, args.profile, execution_from(args))
    failed = [c for c in checks if not c.ok]
    if args.json:
        print_json({"checks": [dataclasses.asdict(c) for c in checks],
                    "ok": len(checks) - len(failed), "to_fix": len(failed)})
        return 1 if failed else 0
    print(table(checks))
    print(f"sforge doctor: {len(checks) - len(failed)} OK, {len(failed)} to fix")
    return 1 if failed else 0


# parsers ------------------------------------------------------------------------------
def add_serve(sub: Subcommands) -> None:
    """`sforge serve`'s parser."""
    p = add_command(
        sub, "serve", cmd_serve, "run the judge service (HTTP) that agents submit to",
        "Run the judge service: agents' submissions are graded through the same eval\n"
        "path and store as `sforge eval`, within a capacity of CPUs and of the\n"
        "machine's memory. State (runs, hashed tokens, submissions, queue, results)\n"
        "is kept in SQLite under <results>/<bench>/service/ (local disk, not a shared\n"
        "filesystem), so a restart loses nothing. Admin token: $SFORGE_ADMIN_TOKEN, else\n"
        "<results>/<bench>/service/admin.token (made once, mode 0600). API docs: /docs.\n"
        "SIGTERM drains: no new submissions, running judges finish (service.drain_s),\n"
        "queued ones wait for the next start.",
        examples=["sforge serve                         # 127.0.0.1:8765",
                  "sforge serve --port 0 --socket /tmp/sforge.sock --max-concurrent 4"])
    p.add_argument("--host", metavar="ADDR",
                   help="TCP address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=port_number, metavar="N",
                   help="TCP port (default 8765; 0 picks a free one; with only --socket, "
                        "no TCP)")
    p.add_argument("--socket", metavar="PATH",
                   help="also (or only) listen on this Unix socket: how work containers "
                        "with --network none reach the service")
    p.add_argument("--max-concurrent", type=positive_float, metavar="CPUS",
                   help="judge CPUs busy at once, each judge counting its [judge] cpus "
                        "rounded up to whole cores, as `sforge grade -j` does; a judge "
                        "also holds its [judge] memory of the machine's, and starts only "
                        "when both fit (default: config service.max_concurrent, else the "
                        "machine's cores)")
    p.add_argument("--max-pending", type=positive_int, metavar="N",
                   help="submissions waiting at most; beyond that HTTP 503 + Retry-After "
                        "(default: config service.max_pending)")


def add_doctor(sub: Subcommands) -> None:
    """`sforge doctor`'s parser."""
    p = add_command(
        sub, "doctor", cmd_doctor, "check this host and every cluster node: one table",
        "Check what building and grading need, on this host and, with --profile, in one\n"
        "small job per SLURM node (pinned with --nodelist): Python and the venv (its\n"
        "python must exist on every node), `docker info`, the judge images (in the\n"
        "node's daemon or pullable from the registry), the results directory (readable,\n"
        "writable, shared at the same path) and the clock. A node's job also sweeps the\n"
        "judge containers killed jobs left there. Exit 0 only if every check is OK.",
        examples=["sforge doctor", "sforge doctor --profile slurm",
                  "sforge doctor --json | jq '.checks[] | select(.ok | not)'"])
    add_jobs_options(p)
    add_json_option(p, "the checks (node, check, ok, detail, fix) and counts")


PARSERS: dict[str, AddParser] = {"serve": add_serve, "doctor": add_doctor}
