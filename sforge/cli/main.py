"""The `sforge` command: the top-level parser (global options, the commands in the order
`sforge --help` lists them), finding the command a command line names, running it, and the
exit codes and error kinds every command shares.

Each command group's parsers and printing live in a module of its own (sforge.cli.images,
.grading, .tasks, .service, .runs); what each command does is in sforge.commands.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from sforge import __version__
from sforge.cli import grading, images, service, tasks
from sforge.cli.common import GLOBAL_DEFAULTS, GLOBAL_OPTIONS, AddParser, Parser, print_json
from sforge.cli.completion import add_completion
from sforge.cli.exits import CLOSED_PIPE, INTERRUPTED, error_kind, exit_code, exit_codes_text
from sforge.core.errors import SforgeError
from sforge.runs import COMMANDS as RUN_COMMANDS

DESCRIPTION = "sforge: build images, grade archives, aggregate scores for a benchmark directory."

EPILOG = """\
benchmark: -b/--benchmark DIR, else $SFORGE_BENCHMARK, else edgebench/.
results:   --results DIR, else results/ beside the benchmark directory (<benchmark>/../results);
           products go under <results>/<benchmark name>/.
Plain Snakemake from the repository root makes the same targets: snakemake all|images|grade|report.
--json (list, plan, verify, build, push, pull, eval, grade, report, check, clean, doctor,
       run, runs, agents, import, prove):
           one JSON object on stdout, notes on stderr; an error is {"error", "kind", "code"}.
NO_COLOR set: no colour and no live progress line, plain lines only.
Shell completion: eval "$(sforge completion bash)" (or zsh).

""" + exit_codes_text()

# The order `sforge --help` lists the commands in.
COMMAND_ORDER = ("list", "plan", "verify", "build", "push", "pull", "eval", "grade", "report",
                 "serve", "check", "doctor", "import", *RUN_COMMANDS, "clean", "completion")


def command_named(argv: list[str]) -> str | None:
    """The command `argv` names, as argparse will find it: the first word that is neither a
    global option nor an option's value (a long option may be abbreviated, short ones
    clustered: `-vb DIR`). None when there is none (`sforge --help`). Which options take a
    value is read off the global options themselves."""
    actions = GLOBAL_OPTIONS._actions
    long_values = [o for a in actions if a.nargs != 0 for o in a.option_strings
                   if o.startswith("--")]
    short_values = {o[1] for a in actions if a.nargs != 0 for o in a.option_strings
                    if len(o) == 2}
    short_flags = {"h"} | {o[1] for a in actions if a.nargs == 0 for o in a.option_strings
                           if len(o) == 2}
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word.startswith("--"):
            if "=" not in word and len(word) > 2 and \
                    any(o.startswith(word) for o in long_values):
                next(words, None)
        elif word.startswith("-") and len(word) > 1:
            if word[-1] in short_values and set(word[1:-1]) <= short_flags:
                next(words, None)  # -b DIR, -vb DIR
        else:
            return word
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, the run commands' options are only defined when `argv`
    names one of them (they import the run machinery, which every other command's start
    would pay for). Their names and help are always listed."""
    parser: argparse.ArgumentParser = Parser(
        prog="sforge", description=DESCRIPTION, epilog=EPILOG, parents=[GLOBAL_OPTIONS],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers: dict[str, AddParser] = {**images.PARSERS, **grading.PARSERS, **tasks.PARSERS,
                                     **service.PARSERS,
                                     "completion": lambda s: add_completion(s, build_parser)}
    if argv is None or command_named(argv) in (*RUN_COMMANDS, None):
        from sforge.cli.proofs import PARSERS as PROOF_PARSERS  # function-level: start-up
        from sforge.cli.runs import PARSERS as RUN_PARSERS  # function-level: start-up time

        parsers.update(RUN_PARSERS)
        parsers.update(PROOF_PARSERS)
    for name in COMMAND_ORDER:
        if name in parsers:
            parsers[name](sub)
        else:  # a run command, listed but not defined
            sub.add_parser(name, help=RUN_COMMANDS[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: the process's), sweep orphaned judges, run the command; its
    exit code (sforge.cli.exits: 2 usage, 3 input, 4 infrastructure, 130 interrupted, 141 a
    closed pipe). With --json an error is also one JSON object on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    args: argparse.Namespace | None = None
    try:
        args = build_parser(argv).parse_args(argv)
        if not hasattr(args, "func"):  # a run command command_named missed: define them all
            args = build_parser().parse_args(argv)
        for name, default in GLOBAL_DEFAULTS.items():
            if not hasattr(args, name):
                setattr(args, name, default)
        if getattr(args, "sweep", True):  # `completion` prints a script: no Docker, no sweep
            from sforge.commands.execution import sweep  # function-level: start-up time

            sweep()
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return int(code)
    except BrokenPipeError:
        # `sforge report | head -1`: the reader has what it wanted. Python would report the
        # pipe again when it flushes stdout at exit, so point stdout at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return CLOSED_PIPE
    except SforgeError as exc:
        print(f"sforge: error: {exc}", file=sys.stderr)
        wants_json = getattr(args, "json", False) if args is not None else "--json" in argv
        if wants_json:  # the one JSON object a --json caller parses
            print_json({"error": str(exc), "kind": error_kind(exc), "code": exit_code(exc)})
        return exit_code(exc)
    except KeyboardInterrupt:
        print("sforge: interrupted", file=sys.stderr)
        return INTERRUPTED


def run() -> None:
    """The `sforge` command: main(), then exit without the collector's last passes over
    everything the command built (pandas, the tables): they cost a report after one change
    a sixth of its time (the process frees its memory when it ends)."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
