"""sforge: build images, grade archives, aggregate scores for a benchmark directory.

This module parses arguments and prints; what each command does is in sforge.commands.orchestrate.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sforge import __version__
from sforge.core.errors import SforgeError

EPILOG = """\
benchmark: -b/--benchmark DIR, else $SFORGE_BENCHMARK, else edgebench/.
results:   --results DIR (default results/); products go under <results>/<benchmark name>/.
Plain Snakemake from the repository root makes the same targets: snakemake all|images|grade|report.
"""


def _config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    from sforge.core.config import user_config

    if args.config and not Path(args.config).is_file():
        raise SforgeError(f"{args.config}: config file not found (--config)")
    return user_config(Path(args.config) if args.config else None,
                       {"benchmark": args.benchmark, "results": args.results,
                        "registry": args.registry, **extra})


def _pipeline(config: dict[str, Any]):
    from sforge.plan.pipeline import get_pipeline

    return get_pipeline(config)


def _execution(args):
    from sforge.commands.orchestrate import Execution

    return Execution(jobs=getattr(args, "jobs", 1) or 1, profile=getattr(args, "profile", None),
                     verbose=args.verbose)


def _report_broken(pipe) -> int:
    """Print the benchmark's warnings and broken tasks; the number of broken tasks."""
    from sforge.core.console import warn

    for message in pipe.bench.warnings:
        warn(message)
    for err in pipe.bench.errors:
        print(f"error: {err}", file=sys.stderr)
    return len(pipe.bench.errors)


# list ---------------------------------------------------------------------------------
def cmd_list(args) -> int:
    from sforge.commands.orchestrate import task_rows

    pipe = _pipeline(_config(args))
    rows, found = task_rows(pipe, args.task)
    if found.error:
        print(f"warning: {found.error}", file=sys.stderr)
    bench = pipe.bench
    if args.json:  # TOML dates in metadata become ISO strings
        print(json.dumps({"benchmark": bench.name, "tasks": rows,
                          "bases": {n: r.tag for n, r in pipe.bases.items()},
                          "exclude_status": list(bench.exclude_status),
                          "warnings": bench.warnings,
                          "errors": [str(e) for e in bench.errors]}, indent=2, default=str))
        return 1 if bench.errors else 0
    from tabulate import tabulate

    ranked = sum(r["ranked"] for r in rows)
    print(f"benchmark {bench.name} ({bench.root}): {len(rows)} task(s), {ranked} ranked")
    if bench.exclude_status:
        print(f"  the leaderboard leaves out tasks with status {', '.join(bench.exclude_status)}"
              " ([leaderboard] exclude_status in benchmark.toml)")
    for name, ref in pipe.bases.items():
        print(f"  base {name}: {ref.tag}")
    table = [{"id": r["id"], "name": r["name"], "base": r["base"],
              "metadata": ", ".join(f"{k}={v}" for k, v in sorted(r["metadata"].items())
                                    if isinstance(v, str | int | float)),
              "ranked": "yes" if r["ranked"] else
              f"no (status {pipe.bench.tasks[r['id']].metadata.get('status')})",
              "work": r["work"], "judge": r["judge"], "images": r["state"]} for r in rows]
    print(tabulate(table, headers="keys", tablefmt="simple") if table else "(no tasks)")
    return 1 if _report_broken(pipe) else 0


# plan / build -------------------------------------------------------------------------
def cmd_plan(args) -> int:
    from sforge.commands.orchestrate import plan

    pipe = _pipeline(_config(args))
    out = plan(pipe, args.task, args.force)
    if out.found.error:
        print(f"warning: {out.found.error}", file=sys.stderr)
    for d in out.decisions:
        ref = d.ref
        print(f"{d.action} {ref.kind:5} {ref.name:30} {ref.tag}  ({d.reason})")
    g = out.grading
    print(f"{len(g.pending)} of {len(g.results)} result(s) to grade"
          + (f" ({g.regrade} re-grade: judge image, settings or grading contract changed)"
             if g.regrade else ""))
    build = sum(1 for d in out.decisions if d.action == "build")
    record = len(out.decisions) - build
    print(f"{len(out.images)} image(s): {build} to build, {record} present under their tag "
          f"(only recorded, no build), {len(out.images) - len(out.decisions)} up to date"
          + ("" if out.found.known else
             "; Docker daemon unreachable, so image presence is unknown"))
    return 1 if _report_broken(pipe) else 0


def cmd_verify(args) -> int:
    from sforge.commands.orchestrate import verify

    pipe = _pipeline(_config(args))
    dropped = verify(pipe, args.task)
    for path in dropped:
        print(f"image gone, will rebuild: {path}")
    print(f"sforge verify: {len(dropped)} stale sentinel(s) dropped")
    return 1 if _report_broken(pipe) else 0


def cmd_build(args) -> int:
    from sforge.commands.orchestrate import build_images

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    out = build_images(pipe, args.task, force=args.force, push=args.push,
                       ex=_execution(args))
    for ref in out.failed:
        log = pipe.layout.build_log(ref.kind, ref.name, ref.digest)
        print(f"FAILED {ref.kind} {ref.name} ({ref.tag})", file=sys.stderr)
        if log.exists():
            for line in log.read_text(errors="replace").splitlines()[-15:]:
                print(f"    {line}", file=sys.stderr)
            print(f"  full log: {log}", file=sys.stderr)
    refs, made = out.refs, out.made
    if made:  # the leak check of `check --integrity` on what was just built (no judge run)
        from sforge.check import format_findings
        from sforge.check.integrity import after_build

        leaks = after_build(pipe, made)
        if leaks:
            print(format_findings(leaks), file=sys.stderr)
    print(f"sforge: {len(refs)} image(s): {len(made) - out.reused} built, {out.reused} already "
          f"present, {len(refs) - len(out.todo)} up to date, {len(out.failed)} failed"
          + (f", {out.pushed} pushed" if args.push else "")
          + (f"; {broken} broken task(s)" if broken else ""))
    return 1 if out.failed or broken else 0


def cmd_push(args) -> int:
    from sforge.commands.orchestrate import push_images

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    refs, pushed = push_images(pipe, args.task)
    for ref in pushed:
        print(f"pushed {pipe.remote(ref)}")
    print(f"sforge: {len(refs)} image(s): {len(pushed)} pushed, {len(refs) - len(pushed)} "
          f"already in {pipe.registry}")
    return 1 if broken else 0


def cmd_pull(args) -> int:
    from sforge.commands.orchestrate import pull_images

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    refs, local = pull_images(pipe, args.task,
                              lambda ref: print(f"pulled {pipe.remote(ref)} as {ref.tag}"))
    print(f"sforge: {len(refs)} image(s): {len(refs) - len(local)} pulled, "
          f"{len(local)} already local")
    return 1 if broken else 0


# eval / grade -------------------------------------------------------------------------
def cmd_eval(args) -> int:
    from sforge.core.bulk import no_gc

    with no_gc():  # the eval path's imports make thousands of objects: no collector passes
        from sforge.commands.orchestrate import eval_archive, result_view

    pipe = _pipeline(_config(args))
    if args.task not in pipe.bench.tasks:
        _report_broken(pipe)
    out = eval_archive(pipe, args.task, args.archive, args.source, args.timeout,
                       _execution(args), force=args.force)
    result = out.result
    if out.already:
        print(f"sforge: already graded ({out.path})", file=sys.stderr)
    view = result_view(pipe, result, args.source)
    if args.json:
        print(json.dumps(view))
    else:
        verdict = "valid" if result.valid else "INVALID"
        rescaled = view["rescaled"]
        print(f"{result.task}: {verdict} score={result.score} rescaled="
              f"{'-' if rescaled is None else f'{rescaled:.2f}'}  {result.summary}")
        if result.reason:
            print(f"  reason: {result.reason}")
        for rej in result.rejected:
            print(f"  rejected {rej.path}: {rej.reason}")
        for change in result.changed:
            print(f"  changed {change.path}: {change.change}")
        print(f"  result: {out.path}\n  log: {result.log}")
    return 0


def cmd_grade(args) -> int:
    from sforge.commands.orchestrate import grade_pending

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    out = grade_pending(pipe, args.task, _execution(args), again=args.regrade)
    print(f"sforge: {out.submissions} submission(s), {out.distinct} distinct: "
          f"{out.distinct - out.missing} up to date, {out.missing - out.failed} graded, "
          f"{out.failed} failed")
    return 1 if out.failed or broken else 0


def cmd_report(args) -> int:
    from sforge.commands.orchestrate import make_report
    from sforge.scores import leaderboard_text

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    ok = make_report(pipe, _execution(args), again=args.regrade)
    if pipe.layout.leaderboard.exists():
        print(leaderboard_text(pipe.layout.leaderboard))
        print(f"\nreport: {pipe.layout.report}")
    return 0 if ok and not broken else 1


def cmd_check(args) -> int:
    from sforge.benchmark.loader import tasks_dir_warnings
    from sforge.check import check_benchmark, format_findings
    from sforge.core.console import warn

    config = _config(args)
    for message in tasks_dir_warnings(Path(config["benchmark"])):
        warn(message)
    findings = check_benchmark(Path(config["benchmark"]))
    if args.integrity:
        from sforge.check.integrity import check_integrity

        if args.repeat is not None and args.repeat < 2:
            raise SforgeError("--repeat needs at least 2 runs to compare")
        findings += check_integrity(_pipeline(config), args.task, _execution(args),
                                    repeat=args.repeat or 0)
    elif args.repeat:
        findings += _repeat_findings(args, config)
    if findings:
        print(format_findings(findings))
    errors = [f for f in findings if f.severity == "error"]
    print(f"sforge check: {len(errors)} error(s), {len(findings) - len(errors)} warning(s)")
    return 1 if errors else 0


def _repeat_findings(args, config) -> list:
    """`check --repeat N`: each task's reference judged N times; differing verdicts are an
    error (rule nondeterministic-grader), a task without a reference a warning."""
    from sforge.check import Finding
    from sforge.commands.orchestrate import REFERENCE_SOURCE, repeat_references

    if args.repeat < 2:
        raise SforgeError("--repeat needs at least 2 runs to compare")
    pipe = _pipeline(config)
    outcomes, missing = repeat_references(pipe, args.task, args.repeat, _execution(args))
    found = []
    for out in outcomes:
        task = pipe.bench.tasks[out.task]
        seen = ", ".join(f"{'valid' if v else 'INVALID'} {s}" for v, s, _ in out.verdicts)
        if out.differ:
            found.append(Finding(task.toml_path, None, "nondeterministic-grader",
                                 f"{args.repeat} runs of the judge on {out.archive.name} "
                                 f"disagree: {seen}"))
        else:
            print(f"{out.task}: {args.repeat} runs agree ({seen.split(', ')[0]})")
    for tid in missing:
        found.append(Finding(pipe.bench.tasks[tid].toml_path, None, "nondeterministic-grader",
                             f"no reference to repeat (submissions/{REFERENCE_SOURCE}/{tid}/)",
                             "warning"))
    return found


def cmd_doctor(args) -> int:
    from sforge.commands.doctor import doctor, table

    pipe = _pipeline(_config(args))
    checks = doctor(pipe, args.profile, _execution(args))
    failed = [c for c in checks if not c.ok]
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in checks], indent=1))
        return 1 if failed else 0
    print(table(checks))
    print(f"sforge doctor: {len(checks) - len(failed)} OK, {len(failed)} to fix")
    return 1 if failed else 0


# import -------------------------------------------------------------------------------
def cmd_import(args) -> int:
    from sforge.importers import import_tasks
    from sforge.importers.reference import make_references

    into = Path(args.into).expanduser().resolve()
    reports = import_tasks(args.format, [Path(s) for s in args.src], into, base=args.base,
                           force=args.force)
    if args.reference and any(r.fits for r in reports):
        pipe = _pipeline(_config(args, benchmark=str(into)))
        make_references(pipe, reports, _execution(args))
    if args.json:
        print(json.dumps({"into": str(into), "tasks": [r.to_dict() for r in reports]},
                         indent=2))
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
# clean --------------------------------------------------------------------------------
def cmd_clean(args) -> int:
    from sforge.commands.clean import find_garbage, remove
    from sforge.containers.docker import engine

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    items, no_images = find_garbage(pipe, engine())
    if no_images:
        print(f"sforge: images not checked: {no_images}", file=sys.stderr)
    for item in items:
        print(f"{item.kind:10} {item.what}  ({item.why}; {_size(item.size)})")
    total = _size(sum(i.size for i in items))
    if broken:
        print(f"sforge: {broken} task(s) failed to load: their images and results are kept",
              file=sys.stderr)
    if not items:
        print("sforge clean: nothing unreferenced")
        return 0
    if not args.yes:
        print(f"sforge clean: {len(items)} unreferenced item(s), {total}; "
              "`sforge clean --yes` removes them")
        return 0
    failed = remove(items, engine())
    for item, error in failed:
        print(f"sforge: cannot remove {item.what}: {error}", file=sys.stderr)
    print(f"sforge clean: removed {len(items) - len(failed)} of {len(items)} item(s), {total}")
    return 1 if failed else 0


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# serve --------------------------------------------------------------------------------
def cmd_serve(args) -> int:
    from sforge.service.server import DEFAULT_PORT, Listen, serve

    pipe = _pipeline(_config(args))
    _report_broken(pipe)
    only_socket = args.socket and args.port is None and args.host is None
    listen = Listen(host=args.host or "127.0.0.1",
                    port=None if only_socket else (DEFAULT_PORT if args.port is None
                                                   else args.port),
                    socket=Path(args.socket).resolve() if args.socket else None)
    return serve(pipe, listen, max_concurrent=args.max_concurrent,
                 max_pending=args.max_pending, log_level="debug" if args.verbose else "info")


# parser -------------------------------------------------------------------------------
def _regrade_opt(p) -> None:
    p.add_argument("--regrade", action="extend", nargs="+", metavar="ID",
                   help="grade these tasks' submissions again although results are stored "
                        "(old results kept in evals/<task>/history/; tables use the newest)")
GLOBAL_DEFAULTS: dict[str, Any] = {"benchmark": None, "results": None, "registry": None,
                                   "config": None, "verbose": 0}


def _global_options() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name (`sforge list -b DIR` as well
    as `sforge -b DIR list`). SUPPRESS keeps a subcommand from resetting what was given
    before it; main() fills in the defaults."""
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("global options (before or after the command)")
    g.add_argument("-b", "--benchmark", metavar="DIR", default=argparse.SUPPRESS,
                   help="benchmark directory (default: $SFORGE_BENCHMARK, else edgebench/)")
    g.add_argument("--results", metavar="DIR", default=argparse.SUPPRESS,
                   help="results root (default: results/)")
    g.add_argument("--registry", metavar="HOST[/PATH]", default=argparse.SUPPRESS,
                   help="registry for push/pull and as a build cache (default: "
                        "$SFORGE_REGISTRY, else benchmark.toml's registry)")
    g.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                   help="config file (default: config.yaml of the sforge repository)")
    g.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                   help="-v: one line per finished judge or image; -vv: also Snakemake's "
                        "own job log (default: one live progress line)")
    return common


def _add(sub, name: str, func: Callable, help_: str, desc: str | None = None):
    p = sub.add_parser(name, help=help_, description=desc or help_, parents=[COMMON],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=func)
    return p


def _task_opt(p, help_="only these task ids (repeatable; default: all)") -> None:
    p.add_argument("--task", "-t", action="append", metavar="ID", help=help_)


def _jobs_opt(p) -> None:
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="jobs at once (cores for judges; default 1)")
    p.add_argument("--profile", metavar="NAME",
                   help="run through a Snakemake profile (e.g. profiles/slurm)")


def command_named(argv: list[str]) -> str | None:
    """The command `argv` names, as argparse will find it: the first word that is neither a
    global option nor an option's value (a long option may be abbreviated, short ones
    clustered: `-vb DIR`). None when there is none (`sforge --help`). Which options take a
    value is read off the global options themselves."""
    actions = COMMON._actions
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
    from sforge.runs import COMMANDS as RUN_COMMANDS

    parser = argparse.ArgumentParser(
        prog="sforge", description=__doc__.splitlines()[0], epilog=EPILOG, parents=[COMMON],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _add(sub, "list", cmd_list, "list tasks: id, name, base, metadata, tags, built or not")
    _task_opt(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = _add(sub, "plan", cmd_plan, "show what a build would make and why; builds nothing")
    _task_opt(p)
    p.add_argument("--force", action="store_true", help="plan as if --force were given")

    p = _add(sub, "verify", cmd_verify, "drop sentinels whose image is gone; run before snakemake",
             "Drop every image sentinel whose image is gone from the Docker daemon and the\n"
             "registry, so the next build makes it again. sforge's own commands do this\n"
             "before planning; run it before a plain `snakemake` (parsing the Snakefile\n"
             "never touches the disk).")
    _task_opt(p)

    p = _add(sub, "build", cmd_build, "build base, work and judge images under content tags",
             "Build base, work and judge images under content-hash tags. An image already\n"
             "present under its tag is not rebuilt; exit 0 only if every image is made.\n"
             "Per-image logs: <results>/<bench>/logs/build/.")
    _task_opt(p)
    p.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    p.add_argument("--push", action="store_true",
                   help="push every image the registry lacks (what was built included)")
    _jobs_opt(p)

    p = _add(sub, "push", cmd_push, "push images under their content tags to the registry",
             "Push base, work and judge images as <registry>/<name>:<tag>; an image the\n"
             "registry already holds is not pushed again. Credentials: `docker login`.")
    _task_opt(p)
    p = _add(sub, "pull", cmd_pull, "pull the images the task files hash to",
             "Pull <registry>/<name>:<tag> for every tag the current task files hash to,\n"
             "skipping those present locally, and tag them with their local names.")
    _task_opt(p)

    p = _add(sub, "eval", cmd_eval, "grade one archive with the task's judge",
             "Grade one .tar/.tar.gz archive in a fresh judge container. The archive is\n"
             "stored by sha256 under <results>/<bench>/submissions/; an archive already\n"
             "graded by the same judge and settings is not graded again.")
    p.add_argument("--task", "-t", required=True, metavar="ID")
    p.add_argument("--archive", "-a", required=True, metavar="PATH|-",
                   help="the submission archive, or - for standard input")
    p.add_argument("--json", action="store_true",
                   help="print exactly one JSON object on stdout (logs go to stderr)")
    p.add_argument("--source", default="manual", help="who submitted it (default: manual)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="judge wall clock in seconds, above 0 (default: [judge] timeout_sec); "
                        "an experiment: graded under its own key, the archive kept under "
                        "<results>/<bench>/experiments/, not among the leaderboard's "
                        "submissions")
    p.add_argument("--force", action="store_true",
                   help="grade again although a result is stored (the old result is kept in "
                        "<results>/<bench>/evals/<task>/history/; tables use the newest)")

    p = _add(sub, "grade", cmd_grade, "grade every archive of the submissions directory",
             "Grade <submissions>/<source>/<task>/<name>.tar.gz (optional sidecar\n"
             "<name>.json: submitted_at, elapsed_s, agent, model) and the store of\n"
             "`sforge eval`. Only new (archive, judge, settings) pairs are graded.")
    _task_opt(p)
    _regrade_opt(p)
    _jobs_opt(p)

    p = _add(sub, "report", cmd_report,
             "grade what is pending, then make scores.csv, best.csv, leaderboard, report.html")
    _regrade_opt(p)
    _jobs_opt(p)

    p = _add(sub, "serve", cmd_serve, "run the judge service (HTTP) that agents submit to",
             "Run the judge service: agents' submissions are graded through the same eval\n"
             "path and store as `sforge eval`, within a capacity of CPUs and of the\n"
             "machine's memory. State (runs, hashed tokens, submissions, queue, results)\n"
             "is kept in SQLite under <results>/<bench>/service/ (local disk, not a shared\n"
             "filesystem), so a restart loses nothing. Admin token: $SFORGE_ADMIN_TOKEN, else\n"
             "<results>/<bench>/service/admin.token (made once, mode 0600). API docs: /docs.\n"
             "SIGTERM drains: no new submissions, running judges finish (service.drain_s),\n"
             "queued ones wait for the next start.")
    p.add_argument("--host", metavar="ADDR",
                   help="TCP address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, metavar="N",
                   help="TCP port (default 8765; 0 picks a free one; with only --socket, "
                        "no TCP)")
    p.add_argument("--socket", metavar="PATH",
                   help="also (or only) listen on this Unix socket: how work containers "
                        "with --network none reach the service")
    p.add_argument("--max-concurrent", type=float, metavar="CPUS",
                   help="judge CPUs busy at once, each judge counting its [judge] cpus "
                        "rounded up to whole cores, as `sforge grade -j` does; a judge "
                        "also holds its [judge] memory of the machine's, and starts only "
                        "when both fit (default: config service.max_concurrent, else the "
                        "machine's cores)")
    p.add_argument("--max-pending", type=int, metavar="N",
                   help="submissions waiting at most; beyond that HTTP 503 + Retry-After "
                        "(default: config service.max_pending)")

    p = _add(sub, "check", cmd_check,
             "check the benchmark against edgebench/tasks/SCHEMA.md rules",
             "Check the benchmark against the task rules (no Docker). With --repeat N, also\n"
             "judge each task's reference archive (submissions/reference/<task>/) N times in\n"
             "fresh containers and flag a grader whose verdicts differ. With --integrity,\n"
             "grade the no-op submission, the [reference] and cheat probes with the real\n"
             "judges and read the work images for leaks.")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="judge each task's reference N times; differing verdicts are an error "
                        "(with --integrity: the task's [reference])")
    p.add_argument("--integrity", action="store_true",
                   help="with the built images (built first when missing), prove grading "
                        "cannot be fooled: no judge/solution file, later .git commit or "
                        "canary in the work image; the no-op submission scores the floor; "
                        "[reference] scores full marks; cheat probes are graded as the "
                        "judge decides (README: Integrity)")
    _task_opt(p)
    _jobs_opt(p)

    p = _add(sub, "doctor", cmd_doctor, "check this host and every cluster node: one table",
             "Check what building and grading need, on this host and, with --profile, in one\n"
             "small job per SLURM node (pinned with --nodelist): Python and the venv (its\n"
             "python must exist on every node), `docker info`, the judge images (in the\n"
             "node's daemon or pullable from the registry), the results directory (readable,\n"
             "writable, shared at the same path) and the clock. A node's job also sweeps the\n"
             "judge containers killed jobs left there. Exit 0 only if every check is OK.")
    _jobs_opt(p)
    p.add_argument("--json", action="store_true",
                   help="print the checks as JSON (node, check, ok, detail, fix)")

    p = _add(sub, "import", cmd_import, "convert Harbor or Terminal-Bench tasks into a benchmark",
             "Convert Harbor or Terminal-Bench tasks (each SRC a task directory or a directory\n"
             "of them) into BENCH_DIR/tasks/: instruction.md, environment/, a judge FROM\n"
             "${WORK_IMAGE} that runs the source's tests, task.toml and NOTES.md listing every\n"
             "change. A task whose answer is not files in the submission (tests reading paths\n"
             "outside it, checking packages/services/users, needing compose or the network,\n"
             "timing themselves) is reported and not written. Each imported task's own\n"
             "solution is run in its work image and stored as\n"
             "BENCH_DIR/submissions/reference/<task>/reference.tar.gz. Exit 1 when a task\n"
             "does not fit or its reference could not be made.")
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
    p.add_argument("--json", action="store_true", help="print the per-task report as JSON")
    _jobs_opt(p)

    if argv is None or command_named(argv) in (*RUN_COMMANDS, None):
        from sforge.runs.cli import add_parsers

        add_parsers(sub, _add, _jobs_opt)
    else:
        for name, help_ in RUN_COMMANDS.items():
            sub.add_parser(name, help=help_)

    p = _add(sub, "clean", cmd_clean, "list (and with --yes remove) what nothing refers to",
             "List what no current task file, submission or judge setting refers to any\n"
             "more: images under old content tags, their sentinels and build logs, eval\n"
             "results under keys nothing asks for, stored archives of tasks that are gone,\n"
             "and temporary files of interrupted writes (older than an hour). Nothing still\n"
             "referenced is ever listed (experiments of `eval --timeout` included); tasks\n"
             "that fail to load are left alone.")
    p.add_argument("--yes", action="store_true", help="remove what is listed")
    return parser


def error_kind(exc: SforgeError) -> str:
    """"infrastructure" (Docker, registry, disk: retry later) or "input" (fix what you gave)."""
    from sforge.core.errors import InfrastructureError

    return "infrastructure" if isinstance(exc, InfrastructureError) else "input"


COMMON = _global_options()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    if not hasattr(args, "func"):  # a run command command_named missed: define them all
        args = build_parser().parse_args(argv)
    for name, default in GLOBAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        from sforge.commands.orchestrate import sweep

        sweep()
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # `sforge report | head -1`: the reader has what it wanted. Python would report the
        # pipe again when it flushes stdout at exit, so point stdout at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # as a process killed by SIGPIPE
    except SforgeError as exc:
        print(f"sforge: error: {exc}", file=sys.stderr)
        if getattr(args, "json", False):  # the one JSON object a --json caller parses
            print(json.dumps({"error": str(exc), "kind": error_kind(exc)}))
        return 2
    except KeyboardInterrupt:
        print("sforge: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The `sforge` command: main(), then exit without the collector's last passes over
    everything the command built (pandas, the tables): they cost a report after one change
    a sixth of its time (the process frees its memory when it ends)."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
