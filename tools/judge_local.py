#!/usr/bin/env python3
"""Run a task's judge image directly on an archive and print the result as one JSON line.

No Snakemake and no results directory: the judge image is the one the task's files hash to
(build it first with `sforge build --task ID`), or --image. Shares the judge-run code with
`sforge eval`. Usage: tools/judge_local.py TASK_DIR ARCHIVE [--image TAG] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sforge.archive import ArchiveLimits
from sforge.engine import DockerEngine
from sforge.errors import SforgeError
from sforge.hashing import HashCache, file_sha256
from sforge.images import task_refs
from sforge.loader import load_benchmark
from sforge.rescaling import rescale
from sforge.results import eval_key


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task_dir", type=Path, help="the task directory (inside a benchmark)")
    ap.add_argument("archive", type=Path, help="a .tar or .tar.gz submission archive")
    ap.add_argument("--image", help="judge image to run (default: the task's judge tag)")
    ap.add_argument("--timeout", type=float, help="wall clock (default: [judge] timeout_sec)")
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
        sha = file_sha256(args.archive)
        from sforge.judge import run_judge

        result = run_judge(engine.client, image, task, args.archive, limits=ArchiveLimits(),
                           timeout=args.timeout, submission=sha,
                           key=eval_key(image, sha, task.judge_settings()))
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
