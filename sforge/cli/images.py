"""`sforge list`, `plan`, `verify`, `build`, `push` and `pull`: their parsers, and printing
what sforge.commands.images did."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

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
    print_json,
    report_broken,
)

if TYPE_CHECKING:
    from sforge.benchmark.images import ImageRef
    from sforge.check.findings import Finding
    from sforge.plan.pipeline import Pipeline


# list ---------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    """Print the tasks (a table, or JSON with bases, warnings and errors)."""
    from sforge.commands.images import task_rows  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    rows, found = task_rows(pipe, args.task)
    if found.error:
        print(f"warning: {found.error}", file=sys.stderr)
    bench = pipe.bench
    if args.json:  # TOML dates in metadata become ISO strings
        print_json({"benchmark": bench.name, "tasks": rows,
                    "bases": {n: r.tag for n, r in pipe.bases.items()},
                    "exclude_status": list(bench.exclude_status),
                    "warnings": bench.warnings, "errors": [str(e) for e in bench.errors]})
        return 1 if bench.errors else 0
    from tabulate import tabulate  # function-level: buys start-up time

    ranked = sum(r["ranked"] for r in rows)
    print(f"benchmark {bench.name} ({bench.root}): {len(rows)} task(s), {ranked} ranked"
          + (f", {len(bench.errors)} broken (errors below)" if bench.errors else ""))
    if bench.exclude_status:
        print(f"  the leaderboard leaves out tasks with status {', '.join(bench.exclude_status)}"
              " ([leaderboard] exclude_status in benchmark.toml)")
    for name, ref in pipe.bases.items():
        print(f"  base {name}: {ref.tag}")
    table = [{"id": r["id"], "name": r["name"], "base": r["base"] or "-",
              "metadata": ", ".join(f"{k}={v}" for k, v in sorted(r["metadata"].items())
                                    if isinstance(v, str | int | float)),
              "ranked": "yes" if r["ranked"] else
              f"no (status {pipe.bench.tasks[r['id']].metadata.get('status')})",
              "work": r["work"], "judge": r["judge"], "images": r["state"]} for r in rows]
    print(tabulate(table, headers="keys", tablefmt="simple") if table else "(no tasks)")
    return 1 if report_broken(pipe) else 0


# plan / verify / build ----------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    """Print what a build would make and why, and how many results grading would make."""
    from sforge.commands.images import plan  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    out = plan(pipe, args.task, args.force)
    if out.found.error:
        print(f"warning: {out.found.error}", file=sys.stderr)
    build = sum(1 for d in out.decisions if d.action == "build")
    g = out.grading
    if args.json:
        broken = report_broken(pipe)
        print_json({"decisions": [{"action": d.action, "kind": d.ref.kind, "name": d.ref.name,
                                   "tag": d.ref.tag, "reason": d.reason}
                                  for d in out.decisions],
                    "images": len(out.images), "build": build,
                    "record": len(out.decisions) - build,
                    "up_to_date": len(out.images) - len(out.decisions),
                    "presence_known": out.found.known,
                    "grading": {"results": len(g.results), "pending": len(g.pending),
                                "regrade": g.regrade},
                    "broken_tasks": broken})
        return 1 if broken else 0
    for d in out.decisions:
        ref = d.ref
        print(f"{d.action} {ref.kind:5} {ref.name:30} {ref.tag}  ({d.reason})")
    print(f"{len(g.pending)} of {len(g.results)} result(s) to grade"
          + (f" ({g.regrade} re-grade: judge image, settings or grading contract changed)"
             if g.regrade else ""))
    record = len(out.decisions) - build
    print(f"{len(out.images)} image(s): {build} to build, {record} present under their tag "
          f"(only recorded, no build), {len(out.images) - len(out.decisions)} up to date"
          + ("" if out.found.known else
             "; Docker daemon unreachable, so image presence is unknown"))
    if pipe.bench.errors:
        print(f"{len(pipe.bench.errors)} broken task(s) not planned (errors below)")
    return 1 if report_broken(pipe) else 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Drop the sentinels whose image is gone and list them."""
    from sforge.commands.images import verify  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    dropped = verify(pipe, args.task)
    broken = report_broken(pipe)
    if args.json:
        print_json({"dropped": [str(p) for p in dropped], "broken": broken})
        return 1 if broken else 0
    for path in dropped:
        print(f"image gone, will rebuild: {path}")
    print(f"sforge verify: {len(dropped)} stale sentinel(s) dropped")
    return 1 if broken else 0


def _build_log(pipe: Pipeline, ref: ImageRef) -> str | None:
    """A failed image's build log; None where no build ran (refused, a failed dependency)."""
    log = pipe.layout.build_log(ref.kind, ref.name, ref.digest)
    return str(log) if log.exists() else None


def cmd_build(args: argparse.Namespace) -> int:
    """Build the images; a failed one is listed with the tail of its build log."""
    from sforge.commands.images import build_images  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    broken = report_broken(pipe)
    out = build_images(pipe, args.task, force=args.force, push=args.push,
                       ex=execution_from(args))
    for ref in out.failed:
        log = pipe.layout.build_log(ref.kind, ref.name, ref.digest)
        print(f"FAILED {ref.kind} {ref.name} ({ref.tag})", file=sys.stderr)
        if log.exists():
            for line in log.read_text(errors="replace").splitlines()[-15:]:
                print(f"    {line}", file=sys.stderr)
            print(f"  full log: {log}", file=sys.stderr)
    refs, made = out.refs, out.made
    leaks: list[Finding] = []
    if made:  # the leak check of `check --integrity` on what was just built (no judge run)
        from sforge.check import format_findings  # function-level: buys start-up time
        from sforge.check.integrity import after_build

        leaks = after_build(pipe, made)
        if leaks:
            print(format_findings(leaks), file=sys.stderr)
    code = 1 if out.failed or broken else 0
    if args.json:
        print_json({"images": len(refs), "built": len(made) - out.reused,
                    "already_present": out.reused, "up_to_date": len(refs) - len(out.todo),
                    "failed": [{"kind": r.kind, "name": r.name, "tag": r.tag,
                                "log": _build_log(pipe, r)} for r in out.failed],
                    "pushed": out.pushed if args.push else None, "broken": broken,
                    "warnings": [f.to_dict() for f in leaks]})
        return code
    print(f"sforge: {len(refs)} image(s): {len(made) - out.reused} built, {out.reused} already "
          f"present, {len(refs) - len(out.todo)} up to date, {len(out.failed)} failed"
          + (f", {out.pushed} pushed" if args.push else "")
          + (f"; {broken} broken task(s)" if broken else ""))
    return code


# push / pull --------------------------------------------------------------------------
def cmd_push(args: argparse.Namespace) -> int:
    """Push what the registry lacks and list it."""
    from sforge.commands.images import push_images  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    broken = report_broken(pipe)
    refs, pushed = push_images(pipe, args.task)
    if args.json:
        print_json({"images": len(refs), "pushed": [pipe.remote(r) for r in pushed],
                    "registry": pipe.registry, "broken": broken})
        return 1 if broken else 0
    for ref in pushed:
        print(f"pushed {pipe.remote(ref)}")
    print(f"sforge: {len(refs)} image(s): {len(pushed)} pushed, {len(refs) - len(pushed)} "
          f"already in {pipe.registry}")
    return 1 if broken else 0


def cmd_pull(args: argparse.Namespace) -> int:
    """Pull what the daemon lacks and list it."""
    from sforge.commands.images import pull_images  # function-level: buys start-up time

    pipe = pipeline_from(config_from(args))
    broken = report_broken(pipe)
    pulled: list[dict[str, str]] = []

    def note(ref: ImageRef) -> None:
        if args.json:
            pulled.append({"remote": pipe.remote(ref), "tag": ref.tag})
        else:
            print(f"pulled {pipe.remote(ref)} as {ref.tag}")

    refs, local = pull_images(pipe, args.task, note)
    if args.json:
        print_json({"images": len(refs), "pulled": pulled, "already_local": len(local),
                    "registry": pipe.registry, "broken": broken})
        return 1 if broken else 0
    print(f"sforge: {len(refs)} image(s): {len(refs) - len(local)} pulled, "
          f"{len(local)} already local")
    return 1 if broken else 0


# parsers ------------------------------------------------------------------------------
def add_list(sub: Subcommands) -> None:
    """`sforge list`'s parser."""
    p = add_command(sub, "list", cmd_list,
                    "list tasks: id, name, base, metadata, tags, built or not",
                    examples=["sforge list", "sforge -b mybench list -t knapsack",
                              "sforge list --json | jq -r '.tasks[].id'"])
    add_task_option(p)
    add_json_option(p, "the benchmark, its tasks, bases, warnings and errors")


def add_plan(sub: Subcommands) -> None:
    """`sforge plan`'s parser."""
    p = add_command(sub, "plan", cmd_plan,
                    "show what a build would make and why; builds nothing",
                    "Show what a build would make and why, and how many results grading\n"
                    "would make; builds nothing. With the Docker daemon unreachable the plan\n"
                    "reads the sentinels alone (an image deleted since is not seen): its last\n"
                    "line says so, --json has presence_known false, and the exit code is 0.",
                    examples=["sforge plan", "sforge plan -t knapsack --force",
                              "sforge plan --json | jq '.build'   # images to build"])
    add_task_option(p)
    p.add_argument("--force", action="store_true", help="plan as if --force were given")
    add_json_option(p, "the decisions (action, kind, name, tag, reason) and the counts")


def add_verify(sub: Subcommands) -> None:
    """`sforge verify`'s parser."""
    p = add_command(
        sub, "verify", cmd_verify, "drop sentinels whose image is gone; run before snakemake",
        "Drop every image sentinel whose image is gone from the Docker daemon and the\n"
        "registry, so the next build makes it again. sforge's own commands do this\n"
        "before planning; run it before a plain `snakemake` (parsing the Snakefile\n"
        "never touches the disk).",
        examples=["sforge verify && snakemake grade --cores 2",
                  "sforge verify --json | jq '.dropped | length'"])
    add_task_option(p)
    add_json_option(p, "the sentinels dropped")


def add_build(sub: Subcommands) -> None:
    """`sforge build`'s parser."""
    p = add_command(
        sub, "build", cmd_build, "build base, work and judge images under content tags",
        "Build base, work and judge images under content-hash tags. An image already\n"
        "present under its tag is not rebuilt; exit 0 only if every image is made.\n"
        "Per-image logs: <results>/<bench>/logs/build/.",
        examples=["sforge build -j 2", "sforge build -t knapsack --force",
                  "sforge build --push --registry localhost:5000/edge",
                  "sforge build --json | jq '.failed[].log'"])
    add_task_option(p)
    p.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    p.add_argument("--push", action="store_true",
                   help="push every image the registry lacks (what was built included)")
    add_jobs_options(p)
    add_json_option(p, "the counts, the failed images with their logs and leak warnings")


def add_push(sub: Subcommands) -> None:
    """`sforge push`'s parser."""
    p = add_command(
        sub, "push", cmd_push, "push images under their content tags to the registry",
        "Push base, work and judge images as <registry>/<name>:<tag>; an image the\n"
        "registry already holds is not pushed again. Credentials: `docker login`.",
        examples=["sforge push --registry localhost:5000/edge",
                  "sforge push --json | jq -r '.pushed[]'"])
    add_task_option(p)
    add_json_option(p, "what was pushed")


def add_pull(sub: Subcommands) -> None:
    """`sforge pull`'s parser."""
    p = add_command(
        sub, "pull", cmd_pull, "pull the images the task files hash to",
        "Pull <registry>/<name>:<tag> for every tag the current task files hash to,\n"
        "skipping those present locally, and tag them with their local names.",
        examples=["sforge pull -t knapsack --registry localhost:5000/edge",
                  "sforge pull --json | jq '.pulled | length'"])
    add_task_option(p)
    add_json_option(p, "what was pulled")


PARSERS: dict[str, AddParser] = {"list": add_list, "plan": add_plan, "verify": add_verify,
                                 "build": add_build, "push": add_push, "pull": add_pull}
