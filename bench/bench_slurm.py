"""Grading through SLURM beside grading locally, on the same batch, on one node or several.

A generated benchmark (bench/genbench.py: judges that work `--work` seconds with 1 CPU) and
`-n` distinct submission archives spread over its tasks, in a directory the nodes share
(`--dir`, default <repo>/results/bench_slurm/: the repository is shared at the same path on
every node). The images are built first on this host (not timed), and pushed when a
registry is set (`--registry` or SFORGE_REGISTRY): nodes with their own Docker daemon then
pull the judge images they need during the first SLURM run. Then, each from an empty
results directory holding only the image sentinels:
- locally: `sforge grade -j <CPUs of this host>`;
- through SLURM: `sforge grade --profile profiles/slurm`, once per grouping factor N
  (`--groups`; the profile's own N when not given; other N through a copy of the profile).
With `--stock`, also through the stock executor (`executor: slurm`, same keys) for
comparison. Printed: wall time, SLURM jobs, wall seconds per judge and slot, the wall time
each SLURM job adds beyond the local run, the ratio to the local wall time (goal ≤ 2×),
and per node: SLURM jobs, judges run, and the time its pulls of judge images took. The
result files of every run must agree (score and validity per eval key).

Needs a SLURM cluster whose nodes see this repository and `--dir` at the same paths: the
one-node cluster of `bash scripts/slurm_up.sh` (or `--up`), or several nodes with their own
Docker daemons: `bash scripts/slurm_nodes.sh up 2; eval "$(bash scripts/slurm_nodes.sh env)"`.
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
import time
from collections import defaultdict
from pathlib import Path

from common import SFORGE, remove_images
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
    """A copy of profiles/slurm grouping n judges per SLURM job (stock: executor slurm) that
    keeps the SLURM logs of successful jobs (judges and pulls per node are read from them)."""
    where.mkdir(parents=True, exist_ok=True)
    text = re.sub(r"^(\s+judge:\s*)\d+", rf"\g<1>{n}", (PROFILE / "config.yaml").read_text(),
                  count=1, flags=re.M)
    text = re.sub(r"^sforge-slurm-keep-successful-logs: false$",
                  "sforge-slurm-keep-successful-logs: true", text, flags=re.M)
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


def slurm_nodes() -> dict[str, int]:
    """Nodes that can take a job now (idle or partly used) → their CPUs."""
    if not shutil.which("sinfo"):
        return {}
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %c"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        return {}
    out = {}
    for line in proc.stdout.splitlines():
        name, state, cpus = line.split()
        if state in ("idle", "mixed"):
            out[name] = int(cpus)
    return out


def per_node(root: Path, stderr: str) -> dict[str, dict]:
    """node → SLURM jobs, judges run and seconds spent pulling judge images, from the run's
    output (job ids), squeue (where each ran) and the jobs' logs (kept by profile_with)."""
    logs = dict(re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+?)\)", stderr))
    if not logs:
        return {}
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(logs), "-o", "%i %N"],
                         capture_output=True, text=True).stdout
    where = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    nodes: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "judges": 0, "pull_s": 0.0,
                                                  "pulls": 0})
    for job, log in logs.items():
        row = nodes[where.get(job, "?")]
        row["jobs"] += 1
        text = Path(log).read_text(errors="replace") if Path(log).is_file() else ""
        row["judges"] += max(len(re.findall(r"^rule evaluate:", text, re.M)),
                             len(re.findall(r"\(Rule: evaluate\)", text)),
                             len(re.findall(r"evals/[^/\s]+/[0-9a-f]{20}\.json", text)) // 2)
        for secs in re.findall(r"pulled \S+ on \S+ in ([0-9.]+) s", text):
            row["pull_s"] += float(secs)
            row["pulls"] += 1
    return dict(nodes)


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
    ap.add_argument("--dir", type=Path, default=REPO / "results" / "bench_slurm",
                    help="where the benchmark and results go: shared with the nodes at the "
                         "same path (default <repo>/results/bench_slurm)")
    ap.add_argument("--registry", default=os.environ.get("SFORGE_REGISTRY"),
                    help="push the images there (nodes with their own daemon pull them); "
                         "default $SFORGE_REGISTRY")
    args = ap.parse_args()

    if args.up:
        subprocess.run(["bash", str(REPO / "scripts" / "slurm_up.sh")], check=True)
    try:
        nodes = slurm_nodes()
        if not nodes:
            raise SystemExit("no SLURM node can take a job: run `bash scripts/slurm_up.sh` "
                             "(as root) or pass --up; several nodes: scripts/slurm_nodes.sh")
        measure(args, nodes)
    finally:
        if args.up:
            subprocess.run(["bash", str(REPO / "scripts" / "slurm_down.sh")])


def measure(args, nodes: dict[str, int]) -> None:
    cpus = os.cpu_count() or 1
    default_n = profile_value(r"^\s+judge:\s*(\d+)")
    width = profile_value(r"^cores:\s*(\d+)")  # a group job's CPUs
    # group jobs running at once over the cluster (the same on one node: what fits side by side)
    side_by_side = max(1, sum(c // width for c in nodes.values()))
    runs = [(n, False) for n in (args.groups or [default_n])]
    if args.stock:
        runs.append((default_n, True))
    name = f"slurmbench{int(time.time())}"
    tmp = args.dir.resolve() / name
    tmp.mkdir(parents=True)
    registry = ["--registry", args.registry] if args.registry else []
    rows, nodes_seen = [], {}
    try:
        bench = tmp / "bench"
        ids = make_benchmark(bench, args.tasks, name=name, work_s=args.work, cpus=1)
        make_submissions(bench, ids, args.n)
        built = tmp / "built"
        run([*SFORGE, "-b", str(bench), "--results", str(built), *registry, "build", "-j",
             str(cpus), *(["--push"] if args.registry else [])], args.timeout)
        sentinels = built / name / "images"

        def fresh(label: str) -> Path:
            root = tmp / label
            shutil.copytree(sentinels, root / name / "images")
            return root

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
            profile = profile_with(n, tmp / f"profile-{label}", stock)
            root = fresh(f"slurm-{label}")
            wall, proc = run([*SFORGE, "-b", str(bench), "--results", str(root), *registry,
                              "grade", "--profile", str(profile)], args.timeout)
            jobs = len(re.findall(r"submitted with SLURM jobid", proc.stderr))
            got = results(root, name)
            if got != reference:
                diff = {k for k in set(got) | set(reference) if got.get(k) != reference.get(k)}
                raise SystemExit(f"SLURM (N={n}) results differ from local: {len(diff)} "
                                 f"eval(s), e.g. {sorted(diff)[:3]}")
            executor = "slurm (stock)" if stock else "sforge-slurm"
            rows.append((f"SLURM, executor {executor}, judge={n}", n, jobs, wall))
            nodes_seen[rows[-1][0]] = per_node(root, proc.stderr)
    finally:
        remove_images(name)  # by tag: generated benchmarks share image IDs
        shutil.rmtree(tmp, ignore_errors=True)

    listed = ", ".join(f"{k}: {v} CPUs" for k, v in nodes.items())
    where = "SLURM node = this machine" if len(nodes) == 1 else \
        f"{len(nodes)} SLURM nodes ({listed})"
    print(f"{args.n} archives over {args.tasks} tasks, judges working {args.work:g} s with "
          f"1 CPU; this host {cpus} CPUs; {where}; group jobs {width} CPU(s) wide, "
          f"{side_by_side} at a time" + (f"; images pulled from {args.registry}"
                                         if args.registry else ""))
    print(f"  {'run':44} {'N':>4} {'jobs':>5} {'wall s':>8} {'s/judge·slot':>13} "
          f"{'s added/job':>12} {'× local':>8}")
    for label, n, jobs, wall in rows:
        per = wall * cpus / args.n
        extra = f"{(wall - local) * side_by_side / jobs:9.2f} s" \
            if isinstance(jobs, int) and jobs else "-"
        print(f"  {label:44} {n!s:>4} {jobs!s:>5} {wall:8.1f} {per:11.2f} s {extra:>12} "
              f"{wall / local:7.2f}×")
        for node, row in sorted(nodes_seen.get(label, {}).items()):
            pull = (f"{row['pulls']} judge image(s) pulled in {row['pull_s']:.1f} s"
                    if row["pulls"] else "no pulls (images already there)")
            print(f"      node {node:12} {row['jobs']:3} job(s) {row['judges']:5} judges   {pull}")
    print("  s/judge·slot: wall × CPUs of this host / archives (the floor is the judge's own "
          f"work, {args.work:g} s);")
    print("  s added/job: (wall − local wall) × group jobs at a time / SLURM jobs: what one "
          "SLURM job costs\n  beyond grading its judges (Snakemake start on the node, "
          "queue, polling). Goal: SLURM ≤ 2× local.")
    print("  pull time: summed over a node's pulls (the judges of a job wait for their image)")
    for label, _, _, wall in rows[1:]:
        verdict = "meets" if wall <= 2 * local else "MISSES"
        print(f"  {label}: {wall / local:.2f}× local, {verdict} the 2× goal")


if __name__ == "__main__":
    main()
