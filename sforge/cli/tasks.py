"""`sforge check` and `sforge import`: their parsers, and printing the findings of
sforge.check (with `--repeat`, sforge.commands.references) and the reports of
sforge.importers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sforge.cli.common import (
    AddParser,
    Subcommands,
    add_command,
    add_jobs_options,
    add_json_option,
    add_task_option,
    config_from,
    execution_from,
    pipeline_from,
    positive_int,
    print_json,
)
from sforge.cli.exits import FAILED, OK
from sforge.core.errors import UsageError

if TYPE_CHECKING:
    from sforge.check import Finding


# check --------------------------------------------------------------------------------
def cmd_check(args: argparse.Namespace) -> int:
    """Print the benchmark's findings; exit 1 when one is an error."""
    from sforge.benchmark.loader import tasks_dir_warnings  # function-level: start-up time
    from sforge.check import check_benchmark, format_findings
    from sforge.core.console import warn

    config = config_from(args)
    for message in tasks_dir_warnings(Path(config["benchmark"])):
        warn(message)
    findings = check_benchmark(Path(config["benchmark"]), args.task)
    if args.integrity:
        from sforge.check.integrity import check_integrity  # function-level: start-up time

        if args.repeat is not None and args.repeat < 2:
            raise UsageError("--repeat needs at least 2 runs to compare")
        findings += check_integrity(pipeline_from(config), args.task, execution_from(args),
                                    repeat=args.repeat or 0)
    elif args.repeat:
        findings += _repeat_findings(args, config)
    errors = [f for f in findings if f.severity == "error"]
    if args.json:
        print_json({"findings": [f.to_dict() for f in findings],
                    "errors": len(errors), "warnings": len(findings) - len(errors)})
        return FAILED if errors else OK
    if findings:
        print(format_findings(findings))
    print(f"sforge check: {len(errors)} error(s), {len(findings) - len(errors)} warning(s)")
    return FAILED if errors else OK


def _repeat_findings(args: argparse.Namespace, config: dict[str, Any]) -> list[Finding]:
    """`check --repeat N`: each task's reference judged N times; differing verdicts are an
    error (rule nondeterministic-grader), a task without a reference a warning."""
    from sforge.check import Finding  # function-level: buys start-up time
    from sforge.commands.references import REFERENCE_SOURCE, repeat_references

    if args.repeat < 2:
        raise UsageError("--repeat needs at least 2 runs to compare")
    pipe = pipeline_from(config)
    outcomes, missing = repeat_references(pipe, args.task, args.repeat, execution_from(args))
    found = []
    for out in outcomes:
        task = pipe.bench.tasks[out.task]
        seen = ", ".join(f"{'valid' if v else 'INVALID'} {s}" for v, s, _ in out.verdicts)
        if out.differ:
            found.append(Finding(task.toml_path, None, "nondeterministic-grader",
                                 f"{args.repeat} runs of the judge on {out.archive.name} "
                                 f"disagree: {seen}"))
        else:
            print(f"{out.task}: {args.repeat} runs agree ({seen.split(', ')[0]})",
                  file=sys.stderr if args.json else sys.stdout)
    for tid in missing:
        found.append(Finding(pipe.bench.tasks[tid].toml_path, None, "nondeterministic-grader",
                             f"no reference to repeat (submissions/{REFERENCE_SOURCE}/{tid}/)",
                             "warning"))
    return found


# import -------------------------------------------------------------------------------
def cmd_import(args: argparse.Namespace) -> int:
    """Import tasks (and make their references); print what fits and what does not."""
    from sforge.importers import import_tasks  # function-level: buys start-up time
    from sforge.importers.reference import make_references

    into = Path(args.into).expanduser().resolve()
    reports = import_tasks(args.format, [Path(s) for s in args.src], into, base=args.base,
                           force=args.force)
    if args.reference and any(r.fits for r in reports):
        pipe = pipeline_from(config_from(args, benchmark=str(into)))
        make_references(pipe, reports, execution_from(args))
    if args.json:
        print_json({"into": str(into), "tasks": [r.to_dict() for r in reports]})
    else:
        for r in reports:
            if not r.fits:
                print(f"does not fit  {r.task_id}  ({r.source})")
                for problem in r.problems:
                    print(f"    - {problem}")
                continue
            print(f"imported      {r.task_id}  -> {r.written}")
            if r.reference:
                print(f"    reference: {r.reference}")
            elif r.reference_problem:
                print(f"    no reference: {r.reference_problem}")
        fit = sum(r.fits for r in reports)
        print(f"sforge import: {len(reports)} task(s): {fit} imported, {len(reports) - fit} do "
              f"not fit; changes per task in tasks/<id>/NOTES.md. Next: sforge -b {into} report")
    bad = [r for r in reports if not r.fits or r.reference_problem]
    return 1 if bad else 0


# parsers ------------------------------------------------------------------------------
def add_check(sub: Subcommands) -> None:
    """`sforge check`'s parser."""
    p = add_command(
        sub, "check", cmd_check,
        "check the benchmark: the task format's rules and its own [check] rules",
        "Check the benchmark (no Docker): the task format's rules, for every benchmark\n"
        "(schema, Dockerfiles against their build context, pinning, blobs, judge safety;\n"
        "here-documents are refused, the classic builder cannot build them; a task\n"
        "without [score] rescale is warned about: it counts 0 on the leaderboard), and\n"
        "the house rules benchmark.toml declares under [check] (required metadata keys\n"
        "and values, NOTES.md sections). Exit 1 on any error. docs/write-a-task.md.\n"
        "With --repeat N, also judge each task's reference archive\n"
        "(submissions/reference/<task>/) N times in fresh containers and flag a grader\n"
        "whose verdicts differ. With --integrity, grade the no-op submission, the\n"
        "[reference] and cheat probes with the real judges and read the work images for\n"
        "leaks (README: Integrity).",
        examples=["sforge check", "sforge check --repeat 3 -t knapsack",
                  "sforge check --integrity -j 2",
                  "sforge check --json | jq -r '.findings[] | select(.severity==\"error\")"
                  " | .file'"])
    p.add_argument("--repeat", type=positive_int, metavar="N",
                   help="judge each task's reference N times; differing verdicts are an error "
                        "(with --integrity: the task's [reference])")
    p.add_argument("--integrity", action="store_true",
                   help="with the built images (built first when missing), prove grading "
                        "cannot be fooled: no judge/solution file, later .git commit or "
                        "canary in the work image; the no-op submission scores the floor; "
                        "[reference] scores full marks (none: a warning); cheat probes are "
                        "graded as the judge decides (README: Integrity)")
    add_task_option(p)
    add_jobs_options(p)
    add_json_option(p, "the findings (file, line, rule, message, severity) and counts")


def add_import(sub: Subcommands) -> None:
    """`sforge import`'s parser."""
    p = add_command(
        sub, "import", cmd_import, "convert Harbor or Terminal-Bench tasks into a benchmark",
        "Convert Harbor or Terminal-Bench tasks (each SRC a task directory or a directory\n"
        "of them) into BENCH_DIR/tasks/: instruction.md, environment/, a judge FROM\n"
        "${WORK_IMAGE} that runs the source's tests, task.toml and NOTES.md listing every\n"
        "change. A task whose answer is not files in the submission (tests reading paths\n"
        "outside it, checking packages/services/users, needing compose or the network,\n"
        "timing themselves) is reported and not written. Each imported task's own\n"
        "solution is run in its work image and stored as\n"
        "BENCH_DIR/submissions/reference/<task>/reference.tar.gz. Exit 1 when a task\n"
        "does not fit or its reference could not be made.",
        examples=["sforge import harbor ~/harbor/tasks --into mybench",
                  "sforge import terminal-bench tb/tasks/hello --into mybench --no-reference",
                  "sforge -b mybench report"])
    p.add_argument("format", choices=["harbor", "terminal-bench"])
    p.add_argument("src", nargs="+", metavar="SRC", help="task directory, or a directory of them")
    p.add_argument("--into", required=True, metavar="BENCH_DIR",
                   help="benchmark directory (benchmark.toml is written when missing)")
    p.add_argument("--base", metavar="NAME",
                   help="share bases/NAME: tasks starting FROM its image (or, when it does not "
                        "exist yet, the first task's) start FROM ${BASE_IMAGE} instead")
    p.add_argument("--force", action="store_true", help="replace task directories that exist")
    p.add_argument("--no-reference", dest="reference", action="store_false",
                   help="do not build images and run the solutions")
    add_json_option(p, "the per-task report")
    add_jobs_options(p)


PARSERS: dict[str, AddParser] = {"check": add_check, "import": add_import}
