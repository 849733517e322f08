"""Agent run figures (issue: agent runs), measured side by side in one run.

- start: from the run job's start to the agent's first command running (container up, bundle
  in, prompt written), the bundle already prepared: ≤ 2 s for the script agent; the
  claude-code figure beside it (and its first model request, against a scripted server).
- throughput: 20 script-agent runs (--cpus 0.1, -j 20) on one busybox task, each submitting
  5 distinct archives, vs `sforge grade -j 2` of the same archives in a separate results
  directory (the 20 final workspaces counted in): no submission lost, ≤ 1.5×.

The machine is shared: the load average is printed beside each figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import remove_images, row, sforge

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))  # model_server

RUNS = 20
PER_RUN = 5
# five distinct answers per run: the run's repeat number and the container's id in digits
SCRIPT = """set -e
u=$(hostname | tr -dc 0-9 | head -c 6)
for i in 1 2 3 4 5; do echo "$i$u" > answer.txt; sforge-submit >/dev/null || true; done
"""


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} on {os.cpu_count()} cores"


def bench_copy(root: Path) -> tuple[Path, str]:
    name = f"brun{uuid.uuid4().hex[:6]}"
    dest = root / "bench"
    shutil.copytree(REPO / "tests" / "fixtures" / "servicebench", dest)
    toml = dest / "benchmark.toml"
    toml.write_text("\n".join(f'name = "{name}"' if line.startswith("name") else line
                              for line in toml.read_text().splitlines()) + "\n")
    return dest, name


def run(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return took, proc


def records(results: Path, name: str, run_id: str) -> list[dict]:
    return [json.loads(p.read_text())
            for p in sorted((results / name / "runs" / run_id).glob("*/*/run.json"))]


def start_figures(bench: Path, results: Path, name: str, tmp: Path) -> None:
    script = tmp / "quick.sh"
    script.write_text("true\n")
    took, _ = run(sforge(bench, results, "run", "--agent", "script", "--script", str(script),
                         "--task", "quick", "--run-id", "start", "--repeat", "3",
                         "--max-resumes", "0"))
    starts = sorted(r["startup_s"] for r in records(results, name, "start"))
    print(f"start of a run ({load()})")
    row("script agent: job start → first command (median of 3)", starts[1], "goal ≤ 2 s")
    row("script agent: whole `sforge run` command, 3 runs", took)

    from model_server import ScriptedModel

    model = ScriptedModel(commands=[]).start()
    t0 = time.time()
    try:
        run(sforge(bench, results, "run", "--agent", "claude-code", "--task", "quick",
                   "--run-id", "claude-start", "--max-resumes", "0", "--model-api", model.url),
            env={"ANTHROPIC_API_KEY": "sk-bench"})
    finally:
        model.stop()
    rec = records(results, name, "claude-start")[0]
    row("claude-code: job start → first command", rec["startup_s"])
    first = json.loads((results / name / "runs" / "claude-start" / "quick" / "0" /
                        "transcript.jsonl").read_text().splitlines()[0])["at"]
    from datetime import datetime

    started = datetime.fromisoformat(rec["started_at"]).timestamp()
    row("claude-code: job start → first model request at the server",
        datetime.fromisoformat(first).timestamp() - started)
    del t0


def throughput(bench: Path, results: Path, name: str, tmp: Path) -> None:
    script = tmp / "five.sh"
    script.write_text(SCRIPT)
    took, _ = run(sforge(bench, results, "run", "--agent", "script", "--script", str(script),
                         "--task", "quick", "--run-id", "many", "--repeat", str(RUNS),
                         "--cpus", "0.1", "--memory", "64m", "-j", str(RUNS),
                         "--max-resumes", "0", "--timeout", "600"))
    recs = records(results, name, "many")
    rounds = sum(r["rounds"] for r in recs)
    lost = [r["repeat"] for r in recs if r["rounds"] != PER_RUN + 1
            or any(s["state"] != "done" for s in r["submissions"])]
    # the same archives, graded by `sforge grade -j 2` in a separate results directory
    other_bench = tmp / "bench2"
    shutil.copytree(bench, other_bench, ignore=shutil.ignore_patterns("submissions"))
    store = results / name / "submissions"
    archives = 0
    for src in sorted(store.glob("run-many-*/quick/*.tar.gz")):
        dest = other_bench / "submissions" / src.parent.parent.name / "quick" / src.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
        archives += 1
    grade_took, _ = run(sforge(other_bench, tmp / "results2", "grade", "-j", "2"))
    print(f"throughput ({load()})")
    print(f"  {len(recs)} runs, {rounds} rounds graded ({RUNS} × {PER_RUN} + {RUNS} finals), "
          f"{archives} distinct archives, runs missing a round: {lost or 'none'}")
    row(f"{RUNS} script runs, --cpus 0.1 -j {RUNS}", took)
    row(f"sforge grade -j 2 of the same {archives} archives", grade_took)
    print(f"  ratio {took / grade_took:.2f}×  (goal ≤ 1.5×)")


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-runs-"))
    bench, name = bench_copy(tmp)
    results = tmp / "results"
    try:
        run(sforge(bench, results, "build"))
        start_figures(bench, results, name, tmp)
        throughput(bench, results, name, tmp)
    finally:
        remove_images(name)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
