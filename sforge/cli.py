"""sforge: build images, grade archives, aggregate scores for a benchmark directory.

Fast paths answer from the same targets the Snakefile declares (sentinels, result files)
without starting Snakemake when nothing needs making: its import alone costs ~1 s here.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__
from .errors import SforgeError

EPILOG = """\
benchmark: -b/--benchmark DIR, else $SFORGE_BENCHMARK, else edgebench/.
results:   --results DIR (default results/); products go under <results>/<benchmark name>/.
Plain Snakemake from the repository root makes the same targets: snakemake all|images|grade|report.
"""


def _config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    from .config import REPO_ROOT, load_config
    from .model import DEFAULT_BENCHMARK

    overrides = {"benchmark": args.benchmark, "results": args.results,
                 "registry": args.registry, **extra}
    config = load_config(Path(args.config) if args.config else REPO_ROOT / "config.yaml",
                         overrides)
    if config["benchmark"] == DEFAULT_BENCHMARK and not Path(DEFAULT_BENCHMARK).is_dir():
        config["benchmark"] = str(REPO_ROOT / DEFAULT_BENCHMARK)  # the bundled one
    # Relative paths mean the user's working directory, never the repository's.
    for key in ("benchmark", "results", "submissions"):
        if config.get(key):
            config[key] = str(Path(config[key]).expanduser().resolve())
    return config


def _pipeline(config: dict[str, Any]):
    from .pipeline import get_pipeline

    return get_pipeline(config)


def _report_broken(pipe) -> int:
    for err in pipe.bench.errors:
        print(f"error: {err}", file=sys.stderr)
    return len(pipe.bench.errors)


def _workflow(args, config, targets, *, cores=None, quiet=False) -> bool:
    from .workflow import Run, run

    config = dict(config, verify_images=False)  # the CLI has checked them already
    return run(Run(targets=[str(t) for t in targets], config=config,
                   cores=cores or getattr(args, "jobs", 1) or 1,
                   profile=getattr(args, "profile", None), quiet=quiet,
                   verbose=args.verbose))


# list ---------------------------------------------------------------------------------
def cmd_list(args) -> int:
    pipe = _pipeline(_config(args))
    present = _present_tags(pipe, pipe.images(args.task), quiet=True)
    rows = []
    for task in pipe.tasks(args.task):
        refs = pipe.refs[task.id]
        base = pipe.bases.get(task.environment.base) if task.environment.base else None
        built = [r for r in (base, refs["work"], refs["judge"]) if r]
        state = "unknown" if present is None else (
            "built" if all(pipe.sentinel(r).exists() and r.tag in present for r in built)
            else "not built")
        meta = ", ".join(f"{k}={v}" for k, v in sorted(task.metadata.items())
                         if isinstance(v, str | int | float))
        rows.append({"id": task.id, "name": task.name, "base": task.environment.base or "-",
                     "metadata": meta, "work": refs["work"].tag, "judge": refs["judge"].tag,
                     "state": state})
    if args.json:
        print(json.dumps({"benchmark": pipe.bench.name, "tasks": rows,
                          "bases": {n: r.tag for n, r in pipe.bases.items()},
                          "errors": [str(e) for e in pipe.bench.errors]}, indent=2))
    else:
        from tabulate import tabulate

        print(f"benchmark {pipe.bench.name} ({pipe.bench.root}): {len(rows)} task(s)")
        for name, ref in pipe.bases.items():
            print(f"  base {name}: {ref.tag}")
        print(tabulate(rows, headers="keys", tablefmt="simple") if rows else "(no tasks)")
    return 1 if _report_broken(pipe) else 0


def _present_tags(pipe, refs, quiet=False) -> set[str] | None:
    from .errors import InfrastructureError
    from .targets import engine

    try:
        return engine().existing_tags(r.tag for r in refs)
    except InfrastructureError as exc:
        if not quiet:
            raise
        print(f"warning: {exc}", file=sys.stderr)
        return None


# plan / build -------------------------------------------------------------------------
def plan_images(pipe, refs, present: set[str] | None, force: bool) -> list[tuple[Any, str]]:
    """(ref, reason) for every image that a build would make."""
    out = []
    for ref in refs:
        sentinel = pipe.sentinel(ref)
        if force:
            out.append((ref, "forced"))
        elif not sentinel.exists():
            older = sorted(p.stem for p in sentinel.parent.glob("*.json")) \
                if sentinel.parent.is_dir() else []
            if present is not None and ref.tag in present:
                out.append((ref, "image present, sentinel to record (no build)"))
            elif older:
                out.append((ref, f"new hash (was {', '.join(older[-3:])})"))
            else:
                out.append((ref, "never built"))
        elif present is not None and ref.tag not in present:
            out.append((ref, "image missing from the daemon"))
    return out


def cmd_plan(args) -> int:
    pipe = _pipeline(_config(args))
    refs = pipe.images(args.task)
    present = _present_tags(pipe, refs, quiet=True)
    todo = plan_images(pipe, refs, present, args.force)
    for ref, reason in todo:
        print(f"build {ref.kind:5} {ref.name:30} {ref.tag}  ({reason})")
    print(f"{len(todo)} of {len(refs)} image(s) to make"
          + ("" if present is not None else " (daemon unreachable: image presence unknown)"))
    return 1 if _report_broken(pipe) else 0


def cmd_build(args) -> int:
    from .build import (
        drop_stale_sentinels,
        image_presence,
        make_image,
        push_image,
        read_sentinel,
    )
    from .targets import engine

    pipe = _pipeline(_config(args, force=args.force, push=args.push or None))
    broken = _report_broken(pipe)
    refs = pipe.images(args.task)
    local, remote = image_presence(pipe, engine(), refs)
    drop_stale_sentinels(pipe, refs, local | remote)
    if args.force:
        for ref in refs:
            pipe.sentinel(ref).unlink(missing_ok=True)
    todo = [r for r in refs if not pipe.sentinel(r).exists()]
    for ref in todo:  # already under its tag: the rule's own function, no DAG needed
        if not args.force and (ref.tag in local or ref.tag in remote):
            make_image(pipe, engine(), ref, present=local)
    pending = [r for r in todo if not pipe.sentinel(r).exists()]
    if pending:
        print(f"sforge: {len(pending)} of {len(refs)} image(s) to build", file=sys.stderr)
        if not args.profile and all(r.base is None or pipe.sentinel(r.base).exists()
                                    for r in pending):
            _build_independent(pipe, pending, args.jobs)
        else:  # images that wait on others, or a cluster: the DAG schedules them
            _workflow(args, pipe.config, [pipe.sentinel(r) for r in pending])
    failed = [r for r in todo if not pipe.sentinel(r).exists()]
    for ref in failed:
        log = pipe.layout.build_log(ref.kind, ref.name, ref.digest)
        print(f"FAILED {ref.kind} {ref.name} ({ref.tag})", file=sys.stderr)
        if log.exists():
            for line in log.read_text(errors="replace").splitlines()[-15:]:
                print(f"    {line}", file=sys.stderr)
            print(f"  full log: {log}", file=sys.stderr)
    made = [r for r in todo if r not in failed]
    records = [read_sentinel(pipe.sentinel(r)) or {} for r in made]
    reused = sum(1 for rec in records if rec.get("reused"))
    pushed = sum(1 for rec in records if rec.get("pushed"))
    if args.push and not failed:  # and whatever the registry still lacks
        pushed += sum(push_image(pipe, engine(), r) for r in refs)
    print(f"sforge: {len(refs)} image(s): {len(made) - reused} built, {reused} already present,"
          f" {len(refs) - len(todo)} up to date, {len(failed)} failed"
          + (f", {pushed} pushed" if args.push else "")
          + (f"; {broken} broken task(s)" if broken else ""))
    return 1 if failed or broken else 0


def _build_independent(pipe, refs, jobs: int) -> None:
    """Images whose inputs all exist are independent jobs of the DAG: run the rule's own
    function for each, `jobs` at a time, without paying Snakemake's ~1.5 s start."""
    from concurrent.futures import ThreadPoolExecutor

    from .targets import make_image_target

    def one(ref) -> None:
        try:
            make_image_target(pipe, ref.kind, ref.name, ref.digest)
        except SforgeError as exc:  # listed with its log tail by the caller
            print(f"sforge: {exc}", file=sys.stderr)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, refs))


def cmd_push(args) -> int:
    from .build import push_image
    from .targets import engine

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    refs = pipe.images(args.task)
    pushed = 0
    for ref in refs:
        if push_image(pipe, engine(), ref):
            pushed += 1
            print(f"pushed {pipe.remote(ref)}")
    print(f"sforge: {len(refs)} image(s): {pushed} pushed, {len(refs) - pushed} already in "
          f"{pipe.registry}")
    return 1 if broken else 0


def cmd_pull(args) -> int:
    from .targets import engine

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    refs = pipe.images(args.task)
    local = engine().existing_tags(r.tag for r in refs)
    if not pipe.registry:
        raise SforgeError("no registry to pull from (use --registry, SFORGE_REGISTRY or "
                          "registry in benchmark.toml)")
    for ref in refs:
        if ref.tag not in local:
            engine().pull(pipe.remote(ref), ref.tag)
            print(f"pulled {pipe.remote(ref)} as {ref.tag}")
    print(f"sforge: {len(refs)} image(s): {len(refs) - len(local)} pulled, "
          f"{len(local)} already local")
    return 1 if broken else 0


# eval / grade -------------------------------------------------------------------------
def _ensure_judge(args, pipe, task_id: str) -> None:
    """Make the judge image's sentinel (building base and judge first when needed)."""
    refs = _prepare_images(pipe, [task_id])
    if all(pipe.sentinel(r).exists() for r in refs):
        return
    if not _workflow(args, pipe.config, [pipe.sentinel(r) for r in refs], quiet=True) or \
            not all(pipe.sentinel(r).exists() for r in refs):
        raise SforgeError(f"cannot build the judge image of {task_id} "
                          f"(see: sforge build --task {task_id})")


def result_view(pipe, result, source: str) -> dict[str, Any]:
    from .rescale import rescale

    task = pipe.bench.tasks[result.task]
    data = result.to_dict()
    data["source"] = source
    data["rescaled"] = rescale(task.score.rescale, result.score) if result.valid else None
    data["direction"] = task.score.direction
    return data


def cmd_eval(args) -> int:
    from .results import EvalResult
    from .submissions import store_archive
    from .targets import grade

    pipe = _pipeline(_config(args))
    task = pipe.bench.tasks.get(args.task)
    if task is None:
        _report_broken(pipe)
        raise SforgeError(f"unknown or broken task {args.task!r}")
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    if args.archive == "-":
        sub = store_archive(pipe.layout.store, args.source, task.id, sys.stdin.buffer, now)
    else:
        path = Path(args.archive)
        if not path.is_file():
            raise SforgeError(f"{path}: archive not found")
        with path.open("rb") as fh:
            sub = store_archive(pipe.layout.store, args.source, task.id, fh, now)
    if args.timeout:
        task = dataclasses.replace(task, judge=dataclasses.replace(task.judge,
                                                                   timeout_sec=args.timeout))
    target = pipe.eval_target(task.id, sub.sha256, sub.path, task)
    out = pipe.eval_path(target)
    if out.exists():
        result = EvalResult.read(out)
        print(f"sforge: already graded ({out})", file=sys.stderr)
    else:
        _sweep()
        _ensure_judge(args, pipe, task.id)
        result = grade(pipe, target)
    view = result_view(pipe, result, args.source)
    if args.json:
        print(json.dumps(view))
    else:
        verdict = "valid" if result.valid else "INVALID"
        rescaled = view["rescaled"]
        print(f"{task.id}: {verdict} score={result.score} rescaled="
              f"{'-' if rescaled is None else f'{rescaled:.2f}'}  {result.summary}")
        if result.reason:
            print(f"  reason: {result.reason}")
        for rej in result.rejected:
            print(f"  rejected {rej.path}: {rej.reason}")
        print(f"  result: {out}\n  log: {result.log}")
    return 0


def cmd_grade(args) -> int:
    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    records = pipe.records(args.task)
    paths = sorted({p for _, p in records})
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"sforge: {len(missing)} of {len(paths)} result(s) to grade", file=sys.stderr)
        _sweep()
        _prepare_images(pipe, args.task)
        _workflow(args, pipe.config, missing)
    still = [p for p in missing if not p.exists()]
    print(f"sforge: {len(records)} submission(s), {len(paths)} distinct: "
          f"{len(paths) - len(missing)} up to date, {len(missing) - len(still)} graded, "
          f"{len(still)} failed")
    return 1 if still or broken else 0


def _sweep() -> None:
    """Remove judge containers left by sforge processes that died (never a live run's)."""
    from .judge import sweep_stale_containers
    from .targets import engine

    for cid in sweep_stale_containers(engine().client):
        print(f"sforge: removed stale judge container {cid[:12]}", file=sys.stderr)


def _prepare_images(pipe, ids) -> list:
    """The base and judge refs grading needs, their sentinels made truthful."""
    from .targets import verify_sentinels

    refs = pipe.images(ids, kinds=("base", "judge"))
    verify_sentinels(pipe, refs)
    return refs


def cmd_report(args) -> int:
    from .scores import leaderboard_text

    pipe = _pipeline(_config(args))
    broken = _report_broken(pipe)
    _prepare_images(pipe, None)
    # Pending results are targets of their own: Snakemake does not remake a missing
    # intermediate file when what depends on it is present.
    pending = sorted({p for _, p in pipe.records() if not p.exists()})
    if pending:
        _sweep()
    ok = _workflow(args, pipe.config, [*pending, pipe.layout.report])
    if pipe.layout.leaderboard.exists():
        print(leaderboard_text(pipe.layout.leaderboard))
        print(f"\nreport: {pipe.layout.report}")
    return 0 if ok and not broken else 1


def cmd_check(args) -> int:
    from .check import check_benchmark, format_findings

    config = _config(args)
    findings = check_benchmark(Path(config["benchmark"]))
    if findings:
        print(format_findings(findings))
    errors = [f for f in findings if f.severity == "error"]
    print(f"sforge check: {len(errors)} error(s), {len(findings) - len(errors)} warning(s)")
    return 1 if errors else 0


# serve --------------------------------------------------------------------------------
def cmd_serve(args) -> int:
    from .service.server import DEFAULT_PORT, Listen, serve

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
def _add(sub, name: str, func: Callable, help_: str, desc: str | None = None):
    p = sub.add_parser(name, help=help_, description=desc or help_,
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sforge", description=__doc__.splitlines()[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-b", "--benchmark", metavar="DIR",
                        help="benchmark directory (default: $SFORGE_BENCHMARK, else edgebench/)")
    parser.add_argument("--results", metavar="DIR", help="results root (default: results/)")
    parser.add_argument("--registry", metavar="HOST[/PATH]",
                        help="registry for push/pull and as a build cache (default: "
                             "$SFORGE_REGISTRY, else benchmark.toml's registry)")
    parser.add_argument("--config", metavar="FILE",
                        help="config file (default: config.yaml of the sforge repository)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show every Snakemake job (default: progress only)")
    parser.add_argument("--version", action="version", version=f"sforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _add(sub, "list", cmd_list, "list tasks: id, name, base, metadata, tags, built or not")
    _task_opt(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = _add(sub, "plan", cmd_plan, "show what a build would make and why; builds nothing")
    _task_opt(p)
    p.add_argument("--force", action="store_true", help="plan as if --force were given")

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
                   help="judge wall clock in seconds (default: [judge] timeout_sec)")

    p = _add(sub, "grade", cmd_grade, "grade every archive of the submissions directory",
             "Grade <submissions>/<source>/<task>/<name>.tar.gz (optional sidecar\n"
             "<name>.json: submitted_at, elapsed_s, agent, model) and the store of\n"
             "`sforge eval`. Only new (archive, judge, settings) pairs are graded.")
    _task_opt(p)
    _jobs_opt(p)

    p = _add(sub, "report", cmd_report,
             "grade what is pending, then make scores.csv, best.csv, leaderboard, report.html")
    _jobs_opt(p)

    p = _add(sub, "serve", cmd_serve, "run the judge service (HTTP) that agents submit to",
             "Run the judge service: agents' submissions are graded through the same eval\n"
             "path and store as `sforge eval`, within a CPU capacity. State (runs, hashed\n"
             "tokens, submissions, queue, results) is kept in SQLite under\n"
             "<results>/<bench>/service/ (local disk, not a shared filesystem), so a restart\n"
             "loses nothing. Admin token: $SFORGE_ADMIN_TOKEN, else\n"
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
                        "(default: config service.max_concurrent, else the machine's cores)")
    p.add_argument("--max-pending", type=int, metavar="N",
                   help="submissions waiting at most; beyond that HTTP 503 + Retry-After "
                        "(default: config service.max_pending)")

    _add(sub, "check", cmd_check, "check the benchmark against edgebench/tasks/SCHEMA.md rules")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SforgeError as exc:
        print(f"sforge: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sforge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
