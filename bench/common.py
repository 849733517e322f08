"""Helpers for the bench scripts: timing a command, running sforge as a user would, and
synthetic eval results at scale (one generator for every script that needs them)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sforge.benchmark.submissions import Submission  # noqa: E402
from sforge.grading.results import EvalResult  # noqa: E402

SFORGE = [sys.executable, "-m", "sforge"]


def timed(cmd: list[str], repeat: int = 1, check: bool = True, **kw) -> float:
    """Median wall time of `cmd` over `repeat` runs, process start included."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
        times.append(time.perf_counter() - start)
        if check and proc.returncode != 0:
            raise SystemExit(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return statistics.median(times)


def timed_cpu(cmd: list[str], **kw) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `cmd`, process start included. On a machine shared
    with others the CPU seconds (user + system of the command and its children) say what
    the command itself cost; the wall clock adds whatever the load took."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sforge(bench: Path, results: Path, *args: str) -> list[str]:
    return [*SFORGE, "-b", str(bench), "--results", str(results), *args]


def remove_images(prefix: str, docker_host: str | None = None) -> list[str]:
    """Remove the images tagged `<prefix>*` by tag, never by ID: generated benchmarks share
    layers (and so image IDs) through the build cache, and removing an ID removes every
    tag on it, another benchmark's included. → the tags removed."""
    env = {**os.environ, "DOCKER_HOST": docker_host} if docker_host else None
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                          "--filter", f"reference={prefix}*"],
                         capture_output=True, text=True, env=env).stdout.split()
    tags = sorted({t for t in out if not t.endswith(":<none>")})
    if tags:
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, env=env)
    return tags


def row(label: str, seconds: float, goal: str = "") -> None:
    print(f"  {label:58} {seconds:8.3f} s  {goal}")


# kind → (table parameters, direction, a raw-score sampler around the anchors)
KINDS = {
    "linear": ({"lower": 0.0, "upper": 100.0}, "maximize", lambda g: g.uniform(-10, 120)),
    "min_linear": ({"baseline": 100.0, "expert": 10.0}, "minimize", lambda g: g.uniform(0, 150)),
    "min_linear_positive": ({"baseline": 100.0, "expert": 10.0}, "minimize",
                            lambda g: g.uniform(-5, 150)),
    "min_inverse_anchor": ({"anchor_raw": 2.0, "anchor_score": 50.0}, "minimize",
                           lambda g: g.uniform(0.5, 10)),
    "compression_ratio_cropped_guarded": ({"baseline": 1.0, "expert": 0.2}, "minimize",
                                          lambda g: g.uniform(0.0, 1.2)),
    "log_anchor": ({"anchor_raw": 1000.0, "anchor_score": 60.0}, "maximize",
                   lambda g: g.lognormvariate(5, 2)),
    "log_max": ({"baseline": 10.0, "expert": 1000.0}, "maximize",
                lambda g: g.lognormvariate(4, 2)),
    "log1p_max": ({"baseline": 5.0, "upper": 500.0}, "maximize",
                  lambda g: g.lognormvariate(3, 2)),
    "log_min": ({"baseline": 1000.0, "expert": 10.0}, "minimize",
                lambda g: g.lognormvariate(4, 2)),
    "piecewise_max": ({"baseline": 0.0, "rank30": 47169682940.0, "rank1": 49702568341.0,
                       "super_anchor": 5e10}, "maximize", lambda g: g.uniform(-1e9, 5.2e10)),
    "piecewise_min": ({"baseline": 100.0, "rank30": 50.0, "rank1": 20.0, "super_anchor": 10.0},
                      "minimize", lambda g: g.uniform(0, 120)),
    "piecewise_log_min": ({"baseline": 1e4, "rank30": 1e3, "rank1": 1e2, "super_anchor": 10.0},
                          "minimize", lambda g: g.lognormvariate(6, 2)),
}
CATEGORIES = ("optimization", "systems", "ml", "games", "compression")
START = datetime(2025, 1, 1, tzinfo=UTC)


def toml_value(v: object) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def make_scoring_benchmark(root: Path, n_tasks: int) -> list[tuple[str, str]]:
    """A benchmark of n tasks over every rescale kind and several categories, with no images
    (FROM scratch): for the aggregation and report scripts. → (task id, kind) pairs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmark.toml").write_text('name = "benchagg"\n')
    tasks = []
    kinds = list(KINDS)
    for i in range(n_tasks):
        tid, kind = f"task_{i:04d}", kinds[i % len(kinds)]
        params, direction, _ = KINDS[kind]
        table = ", ".join([f'kind = "{kind}"'] + [f"{k} = {toml_value(v)}"
                                                 for k, v in params.items()])
        tdir = root / "tasks" / tid
        for sub in ("environment", "judge"):
            (tdir / sub).mkdir(parents=True)
            (tdir / sub / "Dockerfile").write_text("FROM scratch\n")
        (tdir / "task.toml").write_text(
            f'id = "{tid}"\ncategory = "{CATEGORIES[i % len(CATEGORIES)]}"\n\n'
            f'[judge]\ncmd = "true"\n\n[score]\ndirection = "{direction}"\n'
            f"rescale = {{ {table} }}\n")
        tasks.append((tid, kind))
    return tasks


def synthetic_result(g: random.Random, task: str, sha: str, key: str,
                     sample: Callable[[random.Random], float], graded: datetime,
                     judge_image: str) -> EvalResult:
    """One eval result as a judge writes it: one in ten invalid (half of those still with a
    raw score), a summary and five per-test details."""
    valid = g.random() > 0.1
    score = sample(g)
    return EvalResult(
        task=task, submission=sha, key=key, valid=valid,
        score=score if valid or g.random() < 0.5 else None,
        summary=f"{g.randint(0, 50)}/50 cases ok",
        details=[{"name": f"case_{j:04d}", "status": "PASSED", "score": 1.0} for j in range(5)],
        reason=None if valid else "grader said invalid",
        duration_s=round(g.uniform(1, 60), 3),
        started_at=(graded - timedelta(seconds=20)).isoformat(),
        finished_at=graded.isoformat(),
        judge_image=judge_image,
    )


def tar_gz(answer: str) -> bytes:
    """A submission archive holding answer.txt (byte-identical for the same answer)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = answer.encode()
        info = tarfile.TarInfo("answer.txt")
        info.size = len(data)
        info.mtime = 1700000000
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def graded_archives(bench: Path, results: Path, n: int, n_tasks: int,
                    n_sources: int = 5) -> list[Path]:
    """n archives in bench/submissions/<source>/<task>/ (a sidecar with agent time for one in
    seven) and, for each, the result file its eval key names, as if graded: what `sforge
    report` finds after a big grading run. The archives are hashed here, as grading them
    would have. → the result paths."""
    from sforge.core.config import load_config
    from sforge.plan.pipeline import Pipeline

    g = random.Random(1)
    tasks = [f"task{i:04d}" for i in range(n_tasks)]
    for i in range(n):
        path = (bench / "submissions" / f"src{i % n_sources}" / tasks[(i // n_sources) % n_tasks]
                / f"s{i}.tar.gz")
        if i < n_sources * n_tasks:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tar_gz(f"{i}"))
        if i % 7 == 0:
            path.with_name(f"s{i}.json").write_text(json.dumps(
                {"submitted_at": "2026-01-01T00:00:00+00:00", "elapsed_s": 60.0 * (i % 700),
                 "agent": "bench", "model": f"m{i % n_sources}"}))
    pipe = Pipeline.from_config(load_config(overrides={"benchmark": str(bench),
                                                       "results": str(results)}, env={}))
    paths = []
    for target in pipe.evals.values():
        path = pipe.eval_path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        synthetic_result(g, target.task, target.sha256, target.key,
                         lambda g: round(g.uniform(0, 10), 3), START,
                         target.judge.tag).write(path)
        paths.append(path)
    return paths


def make_results(root: Path, tasks: list[tuple[str, str]], n: int, n_sources: int,
                 seed: int = 1, write: bool = True) -> list[tuple[Submission, Path]]:
    """N result files (indent-2 JSON, like EvalResult.write) and their records; every 50th
    submission is an identical archive from another source and shares a result file.
    With write=False only the records (same random sequence, same paths)."""
    g = random.Random(seed)
    sources = [f"run-{chr(97 + s)}" for s in range(n_sources)]
    per_pair: dict[tuple[str, str], float] = {}
    records: list[tuple[Submission, Path]] = []
    for i in range(n):
        source = sources[i % n_sources]
        tid, kind = tasks[(i // n_sources) % len(tasks)]
        elapsed = per_pair.get((source, tid), 0.0) + g.uniform(60, 3600)
        per_pair[(source, tid)] = elapsed
        sha = hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()
        key = sha[:20]
        result = synthetic_result(g, tid, sha, key, KINDS[kind][2],
                                  START + timedelta(seconds=elapsed + 30),
                                  f"benchagg.judge.{tid}:0123456789ab")
        path = root / "evals" / tid / f"{key}.json"
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        sub = Submission(source=source, task=tid, name=f"sub-{i:07d}", path=root / f"{i}.tar.gz",
                         sha256=sha, submitted_at=(START + timedelta(seconds=elapsed)).isoformat(),
                         elapsed_s=elapsed, agent="agent-x", model=f"model-{i % n_sources}")
        records.append((sub, path))
        if i % 50 == 49:  # the same archive submitted by another source: one result file
            other = sources[(i + 1) % n_sources]
            records.append((Submission(source=other, task=tid, name=f"dup-{i:07d}",
                                       path=sub.path, sha256=sha, elapsed_s=elapsed,
                                       submitted_at=sub.submitted_at), path))
    return records
