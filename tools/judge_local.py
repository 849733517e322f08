#!/usr/bin/env python3
"""Run a task's judge image directly on an archive and print the result as one JSON line.

No Snakemake and no results directory: the judge image is the one the task's files hash to
(build it first with `sforge build --task ID`), or --image. Shares the judge-run code with
`sforge eval`, and its limits (config.yaml's archive_limits and judge_limits) and eval key
(--timeout and the limits that differ from the defaults included). Usage:
tools/judge_local.py TASK_DIR ARCHIVE [--image TAG] [--timeout S] [--config FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sforge.benchmark.hashing import HashCache, file_sha256
from sforge.benchmark.images import task_refs
from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.rescaling import rescale
from sforge.containers.docker import DockerEngine
from sforge.core.config import user_config
from sforge.core.errors import SforgeError
from sforge.grading.contract import archive_limits, container_limits, judged_task, key_limits
from sforge.grading.results import eval_key


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task_dir", type=Path, help="the task directory (inside a benchmark)")
    ap.add_argument("archive", type=Path, help="a .tar or .tar.gz submission archive")
    ap.add_argument("--image", help="judge image to run (default: the task's judge tag)")
    ap.add_argument("--timeout", type=float, help="wall clock (default: [judge] timeout_sec)")
    ap.add_argument("--config", type=Path,
                    help="config file for archive_limits and judge_limits (default: sforge's "
                         "config.yaml), as `sforge --config`")
    args = ap.parse_args(argv)
    try:
        task_dir = args.task_dir.resolve()
        bench = load_benchmark(task_dir.parent.parent)
        task = bench.tasks.get(task_dir.name)
        if task is None:
            errors = [str(e) for e in bench.errors if getattr(e, "task", None) == task_dir.name]
            raise SforgeError("; ".join(errors) or f"{task_dir}: not a task of {bench.root}")
        image = args.image or task_refs(bench, task, HashCache(), {})["judge"].tag
        engine = DockerEngine()
        if engine.image_id(image) is None:
            raise SforgeError(f"judge image {image} is not built "
                              f"(sforge -b {bench.root} build --task {task.id})")
        # The same task as judged, limits and key as `sforge eval --timeout S` uses.
        config = user_config(args.config, {})
        task = judged_task(task, args.timeout)
        sha = file_sha256(args.archive)
        from sforge.grading.judge import run_judge

        result = run_judge(engine, image, task, args.archive,
                           limits=archive_limits(config),
                           container_limits=container_limits(config), submission=sha,
                           key=eval_key(image, sha, task.judge_settings(),
                                        limits=key_limits(config)))
    except SforgeError as exc:
        print(f"judge_local: error: {exc}", file=sys.stderr)
        return 2
    out = result.to_dict()
    out["judge_image"] = image
    out["rescaled"] = rescale(task.score.rescale, result.score) if result.valid else None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
