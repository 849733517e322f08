"""Grading through SLURM beside grading locally, on the same machine and the same batch.

A generated benchmark (bench/genbench.py: judges that work `--work` seconds with 1 CPU) and
`-n` distinct submission archives spread over its tasks. The images are built first (not
timed). Then, each from an empty results directory holding only the image sentinels:
- locally: `sforge grade -j <CPUs>`;
- through SLURM: `sforge grade --profile profiles/slurm`, once per grouping factor N
  (`--groups`; the profile's own N when not given; other N through a copy of the profile).
With `--stock`, also through the stock executor (`executor: slurm`, same keys) for
comparison. Printed: wall time, SLURM jobs, wall seconds per judge and CPU slot, the wall
time each SLURM job adds beyond the local run, and the ratio to the local wall time (goal
≤ 2×). The result files of every run must agree (score and validity per eval key).

Needs a single-node SLURM with this machine as its node: `bash scripts/slurm_up.sh`, or
pass `--up` to start it here (and stop it afterwards with scripts/slurm_down.sh).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from common import SFORGE
from genbench import make_benchmark

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm"


def make_submissions(bench: Path, ids: list[str], n: int) -> None:
    """n archives, all distinct (a different name inside each), spread over the tasks."""
    for i in range(n):
        task = ids[i % len(ids)]
        data = f"{i % 11}\n".encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("answer.txt")
            info.size, info.mtime = len(data), 1_700_000_000 + i
            tar.addfile(info, io.BytesIO(data))
        out = bench / "submissions" / f"agent{i % 4}" / task / f"s{i:04d}.tar.gz"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(buf.getvalue())


def profile_value(pattern: str) -> int:
    m = re.search(pattern, (PROFILE / "config.yaml").read_text(), re.M)
    if not m:
        raise SystemExit(f"{PROFILE}/config.yaml: nothing matches {pattern}")
    return int(m.group(1))


def profile_with(n: int, where: Path, stock: bool = False) -> Path:
    """A copy of profiles/slurm grouping n judges per SLURM job (stock: executor slurm)."""
    where.mkdir(parents=True, exist_ok=True)
    text = re.sub(r"^(\s+judge:\s*)\d+", rf"\g<1>{n}", (PROFILE / "config.yaml").read_text(),
                  count=1, flags=re.M)
    if stock:
        text = re.sub(r"^executor: sforge-slurm$", "executor: slurm", text, flags=re.M)
        text = re.sub(r"^sforge-slurm-", "slurm-", text, flags=re.M)
    (where / "config.yaml").write_text(text)
    return where


def run(cmd: list[str], timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc


def results(root: Path, name: str) -> dict[str, tuple]:
    out = {}
    for path in (root / name / "evals").glob("*/*.json"):
        data = json.loads(path.read_text())
        out[path.name] = (data.get("valid"), data.get("score"), data.get("summary"))
    return out


def slurm_ready() -> bool:
    if not shutil.which("sinfo"):
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return proc.returncode == 0 and "idle" in proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200, help="submission archives (default 200)")
    ap.add_argument("--tasks", type=int, default=20, help="tasks they spread over (20)")
    ap.add_argument("--work", type=float, default=1.0, help="seconds each judge works (1)")
    ap.add_argument("--groups", type=int, nargs="*", metavar="N",
                    help="grouping factors to measure (default: the profile's)")
    ap.add_argument("--stock", action="store_true",
                    help="also grade through the stock plugin (executor: slurm), N = profile's")
    ap.add_argument("--up", action="store_true",
                    help="start SLURM with scripts/slurm_up.sh, stop it afterwards")
    ap.add_argument("--timeout", type=float, default=1800, help="per run, seconds")
    args = ap.parse_args()

    if args.up:
        subprocess.run(["bash", str(REPO / "scripts" / "slurm_up.sh")], check=True)
    try:
        if not slurm_ready():
            raise SystemExit("no idle SLURM node: run `bash scripts/slurm_up.sh` (as root) "
                             "or pass --up")
        measure(args)
    finally:
        if args.up:
            subprocess.run(["bash", str(REPO / "scripts" / "slurm_down.sh")])


def measure(args) -> None:
    cpus = os.cpu_count() or 1
    default_n = profile_value(r"^\s+judge:\s*(\d+)")
    job_cpus = min(cpus, profile_value(r"^cores:\s*(\d+)"))  # a group job's width
    side_by_side = max(1, cpus // job_cpus)  # group jobs running at once on this node
    runs = [(n, False) for n in (args.groups or [default_n])]
    if args.stock:
        runs.append((default_n, True))
    name = f"slurmbench{int(time.time())}"
    with tempfile.TemporaryDirectory(prefix="bench_slurm.") as tmp:
        tmp = Path(tmp)
        bench = tmp / "bench"
        ids = make_benchmark(bench, args.tasks, name=name, work_s=args.work, cpus=1)
        make_submissions(bench, ids, args.n)
        built = tmp / "built"
        try:
            run([*SFORGE, "-b", str(bench), "--results", str(built), "build", "-j",
                 str(cpus)], args.timeout)
            sentinels = built / name / "images"

            def fresh(label: str) -> Path:
                root = tmp / label
                shutil.copytree(sentinels, root / name / "images")
                return root

            rows = []
            local_root = fresh("local")
            wall, _ = run([*SFORGE, "-b", str(bench), "--results", str(local_root), "grade",
                           "-j", str(cpus)], args.timeout)
            reference = results(local_root, name)
            if len(reference) != args.n:
                raise SystemExit(f"local run graded {len(reference)} of {args.n}")
            local = wall
            rows.append((f"local, sforge grade -j {cpus}", "-", "-", wall))

            for n, stock in runs:
                label = f"{'stock' if stock else 'sforge'}{n}"
                profile = PROFILE if n == default_n and not stock else \
                    profile_with(n, tmp / f"profile-{label}", stock)
                root = fresh(f"slurm-{label}")
                wall, proc = run([*SFORGE, "-b", str(bench), "--results", str(root), "grade",
                                  "--profile", str(profile)], args.timeout)
                jobs = len(re.findall(r"submitted with SLURM jobid", proc.stderr))
                got = results(root, name)
                if got != reference:
                    diff = {k for k in set(got) | set(reference) if got.get(k) != reference.get(k)}
                    raise SystemExit(f"SLURM (N={n}) results differ from local: {len(diff)} "
                                     f"eval(s), e.g. {sorted(diff)[:3]}")
                executor = "slurm (stock)" if stock else "sforge-slurm"
                rows.append((f"SLURM, executor {executor}, judge={n}", n, jobs, wall))
        finally:
            out = subprocess.run(["docker", "images", "-q", "--filter", f"reference={name}*"],
                                 capture_output=True, text=True).stdout
            if out.split():
                subprocess.run(["docker", "rmi", "-f", *sorted(set(out.split()))],
                               capture_output=True)

    print(f"{args.n} archives over {args.tasks} tasks, judges working {args.work:g} s with "
          f"1 CPU; {cpus} CPUs, SLURM node = this machine; group jobs {job_cpus} CPU(s) wide, "
          f"{side_by_side} at a time")
    print(f"  {'run':44} {'N':>4} {'jobs':>5} {'wall s':>8} {'s/judge·slot':>13} "
          f"{'s added/job':>12} {'× local':>8}")
    for label, n, jobs, wall in rows:
        per = wall * cpus / args.n
        extra = f"{(wall - local) * side_by_side / jobs:9.2f} s" \
            if isinstance(jobs, int) and jobs else "-"
        print(f"  {label:44} {n!s:>4} {jobs!s:>5} {wall:8.1f} {per:11.2f} s {extra:>12} "
              f"{wall / local:7.2f}×")
    print("  s/judge·slot: wall × CPUs / archives (the floor is the judge's own work, "
          f"{args.work:g} s);")
    print("  s added/job: (wall − local wall) × group jobs at a time / SLURM jobs: what one "
          "SLURM job costs\n  beyond grading its judges (Snakemake start on the node, "
          "queue, polling). Goal: SLURM ≤ 2× local.")
    for label, _, _, wall in rows[1:]:
        verdict = "meets" if wall <= 2 * local else "MISSES"
        print(f"  {label}: {wall / local:.2f}× local, {verdict} the 2× goal")


if __name__ == "__main__":
    main()
