"""`sforge eval`, `grade`, `report` and `clean`: their parsers, and printing what
sforge.commands.evals and sforge.commands.clean did."""

from __future__ import annotations

import argparse

from sforge.cli.common import (
    AddParser,
    Subcommands,
    add_command,
    add_jobs_options,
    add_json_option,
    add_regrade_option,
    add_task_option,
    config_from,
    execution_from,
    pipeline_from,
    positive_float,
    print_json,
    report_broken,
    require_task,
    source_name,
)
from sforge.cli.exits import FAILED, OK
from sforge.core.console import say


# eval / grade / report ----------------------------------------------------------------
def cmd_eval(args: argparse.Namespace) -> int:
    """Grade one archive and print its verdict (a line, or one JSON object); exit 1 when it
    is INVALID."""
    from sforge.core.bulk import no_gc  # function-level: buys start-up time

    with no_gc():  # the eval path's imports make thousands of objects: no collector passes
        from sforge.commands.evals import eval_archive, result_view  # start-up: under no_gc

    pipe = pipeline_from(config_from(args))
    require_task(pipe, args.task)  # a broken task: exit 1 with why; an unknown id: exit 3
    out = eval_archive(pipe, args.task, args.archive, args.source, args.timeout,
                       execution_from(args), force=args.force)
    result = out.result
    if out.already:
        say(f"already graded ({out.path})")
    view = result_view(pipe, result, args.source)
    if args.json:
        print_json(view)
    else:
        verdict = "valid" if result.valid else "INVALID"
        rescaled = view["rescaled"]
        print(f"{result.task}: {verdict} score={result.score} rescaled="
              f"{'-' if rescaled is None else f'{rescaled:.2f}'}  {result.summary}")
        if result.reason and result.reason != result.summary:  # said once
            print(f"  reason: {result.reason}")
        for rej in result.rejected:
            print(f"  rejected {rej.path}: {rej.reason}")
        for change in result.changed:
            print(f"  changed {change.path}: {change.change}")
        print(f"  result: {out.path}\n  log: {result.log}")
    return OK if result.valid else FAILED


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade every submission that lacks a result and print the counts."""
    from sforge.commands.evals import grade_pending  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    broken = report_broken(pipe)
    out = grade_pending(pipe, args.task, execution_from(args), again=args.regrade)
    counts = {"submissions": out.submissions, "distinct": out.distinct,
              "up_to_date": out.distinct - out.missing, "graded": out.missing - out.failed,
              "failed": out.failed, "broken_tasks": broken}
    if args.json:
        print_json(counts)
    else:
        print(f"sforge: {out.submissions} submission(s), {out.distinct} distinct: "
              f"{counts['up_to_date']} up to date, {counts['graded']} graded, "
              f"{out.failed} failed")
    return FAILED if out.failed or broken else OK


def cmd_report(args: argparse.Namespace) -> int:
    """Grade what is pending, make the report and print the leaderboard."""
    from sforge.commands.evals import make_report  # function-level: buys start-up time
    from sforge.scores import leaderboard_text

    pipe = pipeline_from(config_from(args))
    broken = report_broken(pipe)
    ok = make_report(pipe, execution_from(args), again=args.regrade)
    board = pipe.layout.leaderboard
    if args.json:
        from sforge.scores.tables import leaderboard_records  # function-level: start-up

        rows = leaderboard_records(board) if board.exists() else []
        print_json({"ok": ok and not broken, "broken_tasks": broken, "leaderboard": rows,
                    "leaderboard_csv": str(board), "report": str(pipe.layout.report)})
    elif board.exists():
        print(leaderboard_text(board))
        print(f"\nreport: {pipe.layout.report}")
    return OK if ok and not broken else FAILED


# clean --------------------------------------------------------------------------------
def cmd_clean(args: argparse.Namespace) -> int:
    """List what nothing refers to; with --yes, remove it."""
    from sforge.commands.clean import find_garbage, remove  # function-level: start-up time
    from sforge.containers.docker import engine

    pipe = pipeline_from(config_from(args))
    broken = report_broken(pipe)
    items, no_images = find_garbage(pipe, engine())
    if no_images:
        say(f"images not checked: {no_images}")
    if broken:
        say(f"{broken} task(s) failed to load: their images and results are kept")
    if args.json:
        return _clean_json(args, items)
    for item in items:
        print(f"{item.kind:10} {item.what}  ({item.why}; {_size(item.size)})")
    total = _size(sum(i.size for i in items))
    if not items:
        print("sforge clean: nothing unreferenced")
        return 0
    if not args.yes:
        print(f"sforge clean: {len(items)} unreferenced item(s), {total}; "
              "`sforge clean --yes` removes them")
        return 0
    failed = remove(items, engine())
    for item, error in failed:
        say(f"cannot remove {item.what}: {error}")
    print(f"sforge clean: removed {len(items) - len(failed)} of {len(items)} item(s), {total}")
    return FAILED if failed else OK


def _clean_json(args: argparse.Namespace, items: list) -> int:
    """`clean --json`: the items (kind, what, why, size in bytes), and with --yes what was
    removed and what could not be."""
    from sforge.commands.clean import remove  # function-level: buys start-up time
    from sforge.containers.docker import engine

    failed = remove(items, engine()) if args.yes and items else []
    print_json({"items": [{"kind": i.kind, "what": i.what, "why": i.why, "size": i.size}
                          for i in items],
                "bytes": sum(i.size for i in items), "removed": args.yes,
                "failed": [{"what": i.what, "error": str(e)} for i, e in failed]})
    return FAILED if failed else OK


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# parsers ------------------------------------------------------------------------------
def add_eval(sub: Subcommands) -> None:
    """`sforge eval`'s parser."""
    p = add_command(
        sub, "eval", cmd_eval, "grade one archive with the task's judge",
        "Grade one .tar/.tar.gz archive in a fresh judge container. The archive is\n"
        "stored by sha256 under <results>/<bench>/submissions/<source>/<task>/, and\n"
        "`sforge report` ranks it on the leaderboard as its source (--source, default\n"
        "manual; with --timeout it is an experiment, ranked nowhere). An archive\n"
        "already graded by the same judge and settings is not graded again. Exit 1\n"
        "when the verdict is INVALID, or the task fails to load.",
        examples=["sforge eval -t knapsack -a sub.tar.gz",
                  "tar -cz -C ws . | sforge eval -t knapsack -a - --json | jq .rescaled",
                  "sforge eval -t knapsack -a sub.tar.gz --timeout 60   # an experiment"])
    p.add_argument("--task", "-t", required=True, metavar="ID")
    p.add_argument("--archive", "-a", required=True, metavar="PATH|-",
                   help="the submission archive, or - for standard input (a file's "
                   "name is kept for the report)")
    add_json_option(p, "the result (verdict, score, rescaled, summary, key, log)")
    p.add_argument("--source", default="manual", type=source_name,
                   help="who submitted it: a name of letters, digits, '_', '.', '-' "
                        "(default: manual)")
    p.add_argument("--timeout", type=positive_float, metavar="S",
                   help="judge wall clock in seconds, above 0 (default: [judge] timeout_sec); "
                        "an experiment: graded under its own key, the archive kept under "
                        "<results>/<bench>/experiments/, not among the leaderboard's "
                        "submissions")
    p.add_argument("--force", action="store_true",
                   help="grade again although a result is stored (the old result is kept in "
                        "<results>/<bench>/evals/<task>/history/; tables use the newest)")


def add_grade(sub: Subcommands) -> None:
    """`sforge grade`'s parser."""
    p = add_command(
        sub, "grade", cmd_grade, "grade every archive of the submissions directory",
        "Grade <submissions>/<source>/<task>/<name>.tar.gz (optional sidecar\n"
        "<name>.json: submitted_at, elapsed_s, agent, model) and the store of\n"
        "`sforge eval`. Only new (archive, judge, settings) pairs are graded. Exit 1\n"
        "when a result could not be made (an INVALID verdict is a result).",
        examples=["sforge grade -j 4", "sforge grade -t knapsack -v     # a line per judge",
                  "sforge grade --regrade knapsack   # again, after fixing its judge"])
    add_task_option(p)
    add_regrade_option(p)
    add_jobs_options(p)
    add_json_option(p, "the counts (submissions, distinct, up_to_date, graded, failed)")


def add_report(sub: Subcommands) -> None:
    """`sforge report`'s parser."""
    p = add_command(
        sub, "report", cmd_report,
        "grade what is pending, then make scores.csv, best.csv, leaderboard, report.html",
        examples=["sforge report -j 4",
                  "sforge report --json | jq '.leaderboard[0]'   # the leader"])
    add_regrade_option(p)
    add_jobs_options(p)
    add_json_option(p, "the leaderboard's rows and where the report is")


def add_clean(sub: Subcommands) -> None:
    """`sforge clean`'s parser."""
    p = add_command(
        sub, "clean", cmd_clean, "list (and with --yes remove) what nothing refers to",
        "List what no current task file, submission or judge setting refers to any\n"
        "more: images under old content tags, their sentinels and build logs, eval\n"
        "results under keys nothing asks for, stored archives of tasks that are gone,\n"
        "and temporary files of interrupted writes (older than an hour). Nothing still\n"
        "referenced is ever listed (experiments of `eval --timeout` included); tasks\n"
        "that fail to load are left alone.",
        examples=["sforge clean            # list only", "sforge clean --yes      # remove",
                  "sforge clean --json | jq '.bytes'"])
    p.add_argument("--yes", action="store_true", help="remove what is listed")
    add_json_option(p, "the items (kind, what, why, size)")


PARSERS: dict[str, AddParser] = {"eval": add_eval, "grade": add_grade, "report": add_report,
                                 "clean": add_clean}
