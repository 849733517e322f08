"""What every command module of the CLI shares: the parser class, the global options, the
parser helpers (a command with its examples, --task, -j/--profile, --regrade, --json),
printing JSON, and the configuration, pipeline and execution settings a command's
arguments stand for."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from sforge.benchmark.submissions import check_source
from sforge.core.config import RESULTS_HELP
from sforge.core.errors import SforgeError, UsageError
from sforge.core.units import parse_memory

if TYPE_CHECKING:
    from sforge.commands.execution import Execution
    from sforge.plan.pipeline import Pipeline

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Command: TypeAlias = Callable[[argparse.Namespace], int]
AddParser: TypeAlias = "Callable[[Subcommands], None]"  # defines one command's parser

GLOBAL_DEFAULTS: dict[str, Any] = {"benchmark": None, "results": None, "registry": None,
                                   "config": None, "verbose": 0}


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are UsageErrors: main() prints them, with --json as a
    JSON object too, and exits 2 (sforge.cli.exits) like every other usage error."""

    def error(self, message: str) -> NoReturn:
        """The usage line on stderr, then the error for main()."""
        self.print_usage(sys.stderr)
        command = self.prog.partition(" ")[2]  # "sforge eval" → "eval"
        raise UsageError(f"{command}: {message}" if command else message)


def global_options() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name (`sforge list -b DIR` as well
    as `sforge -b DIR list`). SUPPRESS keeps a subcommand from resetting what was given
    before it; main() fills in the defaults."""
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("global options (before or after the command)")
    g.add_argument("-b", "--benchmark", metavar="DIR", default=argparse.SUPPRESS,
                   help="benchmark directory (default: $SFORGE_BENCHMARK, else edgebench/)")
    g.add_argument("--results", metavar="DIR", default=argparse.SUPPRESS,
                   help=RESULTS_HELP)
    g.add_argument("--registry", metavar="HOST[/PATH]", default=argparse.SUPPRESS,
                   help="registry for push/pull and as a build cache (default: "
                        "$SFORGE_REGISTRY, else benchmark.toml's registry)")
    g.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                   help="config file (default: config.yaml of the sforge repository)")
    g.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                   help="-v: one line per finished judge or image; -vv: also Snakemake's "
                        "own job log (default: one live progress line)")
    return common


GLOBAL_OPTIONS = global_options()


# parser helpers -------------------------------------------------------------------------
def add_command(sub: Subcommands, name: str, func: Command, help_: str,
                desc: str | None = None,
                examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """A command's parser: its one-line help, its description, its examples (the epilog of
    its --help: `sforge ...  # what it does`), the global options."""
    epilog = "examples:\n" + "".join(f"  {e}\n" for e in examples) if examples else None
    p = sub.add_parser(name, help=help_, description=desc or help_, parents=[GLOBAL_OPTIONS],
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=func)
    return p


def add_task_option(p: argparse.ArgumentParser,
                    help_: str = "only these task ids (repeatable; default: all)") -> None:
    """--task/-t ID, repeatable."""
    p.add_argument("--task", "-t", action="append", metavar="ID", help=help_)


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a whole number of {least} or more") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value}: expected {least} or more")
    return value


def _finite(text: str, above_zero: bool) -> float:
    want = "above 0" if above_zero else "of 0 or more"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number {want}") from None
    if not (math.isfinite(value) and (value > 0 if above_zero else value >= 0)):
        raise argparse.ArgumentTypeError(f"{text}: expected a finite number {want}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number of 1 or more (`-j 0` is a usage error)."""
    return _whole(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of 0 or more (a budget)."""
    return _whole(text, 0)


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds: `--timeout 0` is a usage error)."""
    return _finite(text, above_zero=True)


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of 0 or more (a cooldown in seconds)."""
    return _finite(text, above_zero=False)


def memory_size(text: str) -> str:
    """An argparse type: a Docker memory size (`4g`, `512m`), checked as the engine reads it."""
    try:
        parse_memory(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def source_name(text: str) -> str:
    """An argparse type: a source, as the store takes it (`--source ../x` is a usage error)."""
    try:
        return check_source(text)
    except SforgeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port number, 0 to 65535")
    return value


def add_jobs_options(p: argparse.ArgumentParser) -> None:
    """-j/--jobs and --profile: how Snakemake runs what the command makes."""
    p.add_argument("-j", "--jobs", type=positive_int, default=1, metavar="N",
                   help="jobs at once (cores for judges; default 1)")
    p.add_argument("--profile", metavar="NAME",
                   help="run through a Snakemake profile (e.g. profiles/slurm)")


def add_regrade_option(p: argparse.ArgumentParser) -> None:
    """--regrade ID...: tasks whose stored results are graded anew."""
    p.add_argument("--regrade", action="extend", nargs="+", metavar="ID",
                   help="grade these tasks' submissions again although results are stored "
                        "(old results kept in evals/<task>/history/; tables use the newest)")


def add_json_option(p: argparse.ArgumentParser, what: str) -> None:
    """--json: `what` as one JSON object on stdout (notes and progress stay on stderr)."""
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as one JSON object on stdout (notes go to stderr; an "
                        "error is {\"error\", \"kind\", \"code\"})")


def print_json(data: Any) -> None:
    """The one JSON document a --json command prints: an object on one line (so a log of
    several commands is JSON lines), dates and paths as strings."""
    print(json.dumps(data, default=str))


# what the arguments stand for -----------------------------------------------------------
def config_from(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The configuration the command runs with: --config (which must exist), the
    environment, the global options and `extra`."""
    from sforge.core.config import user_config  # function-level: buys start-up time

    if args.config and not Path(args.config).is_file():
        raise SforgeError(f"{args.config}: config file not found (--config)")
    return user_config(Path(args.config) if args.config else None,
                       {"benchmark": args.benchmark, "results": args.results,
                        "registry": args.registry, **extra})


def pipeline_from(config: dict[str, Any]) -> Pipeline:
    """The process's one Pipeline for `config`."""
    from sforge.plan.pipeline import get_pipeline  # function-level: buys start-up time

    return get_pipeline(config)


def execution_from(args: argparse.Namespace) -> Execution:
    """How Snakemake runs for this command: -j/--jobs, --profile, -v."""
    from sforge.commands.execution import Execution  # function-level: buys start-up time

    return Execution(jobs=getattr(args, "jobs", 1) or 1, profile=getattr(args, "profile", None),
                     verbose=args.verbose)


class BrokenTask(SforgeError):
    """A task named on the command line whose directory is there but whose files fail to
    load: a failure of the benchmark (exit 1, as `grade` gives for it), not an unknown id."""


def require_task(pipe: Pipeline, task_id: str) -> None:
    """Return when `task_id` names a task that loaded. A task that failed to load raises
    BrokenTask with its load error in one line, as `sforge check` says it (file:line:
    [field] message); an id that names no task directory raises the input error every
    command gives (with its `sforge list` hint)."""
    if task_id in pipe.bench.tasks:
        return
    for err in pipe.bench.errors:
        if getattr(err, "task", None) != task_id:
            continue
        from sforge.check.tasks import definition_finding  # function-level: start-up time

        found = definition_finding(err, pipe.bench.root)
        raise BrokenTask(f"task {task_id!r} failed to load: {found.where()}: {found.message}")
    pipe.bench.require([task_id])


def report_broken(pipe: Pipeline) -> int:
    """Print the benchmark's warnings and broken tasks; the number of broken tasks."""
    from sforge.core.console import warn  # function-level: buys start-up time

    for message in pipe.bench.warnings:
        warn(message)
    for err in pipe.bench.errors:
        print(f"error: {err}", file=sys.stderr)
    return len(pipe.bench.errors)
