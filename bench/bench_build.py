"""Build figures over a generated benchmark (default 200 tasks on one busybox base).

- no-op `sforge build` over all built tasks, beside the floor measured in the same run:
  one `docker image inspect` call for every tag (goal ≤ 0.8 s);
- one task edited: only its images are built; the overhead beyond the Docker build
  itself (goal ≤ 2 s).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import remove_images, row, sforge, timed
from genbench import make_benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("-j", type=int, default=2)
    args = ap.parse_args()
    name = f"buildbench{int(time.time())}"
    with tempfile.TemporaryDirectory() as tmp:
        bench, results = Path(tmp) / "bench", Path(tmp) / "results"
        make_benchmark(bench, args.n, name=name)
        try:
            print(f"sforge build over {args.n} tasks ({2 * args.n + 1} images)")
            full = timed(sforge(bench, results, "build", "-j", str(args.j)))
            row(f"full build, -j {args.j}", full)
            tags = [json.loads(p.read_text())["tag"]
                    for p in (results / name / "images").glob("*/*/*.json")]
            floor = timed(["docker", "image", "inspect", "--format", "{{.Id}}", *tags], repeat=5)
            noop = timed(sforge(bench, results, "build"), repeat=5)
            row(f"floor: one `docker image inspect` of {len(tags)} tags", floor)
            row("no-op `sforge build` (median of 5)", noop,
                f"goal ≤ 0.8 s; {noop / floor:.1f}× floor")
            noop_plan = timed(sforge(bench, results, "plan"), repeat=3)
            row("no-op `sforge plan`", noop_plan)

            run_sh = bench / "tasks" / "task0007" / "judge" / "run.sh"
            run_sh.write_text(run_sh.read_text() + "# edited\n")
            time.sleep(0.01)
            one = timed(sforge(bench, results, "build"))
            newest = max((results / name / "images" / "judge" / "task0007").glob("*.json"),
                         key=lambda p: p.stat().st_mtime_ns)
            docker_s = json.loads(newest.read_text())["build_seconds"]
            built = sum(1 for p in (results / name / "images").glob("*/*/*.json")) - len(tags)
            row(f"one task edited: `sforge build` ({built} image built)", one)
            row("  of which the Docker build itself", docker_s)
            row("  overhead beyond the Docker build", one - docker_s, "goal ≤ 2 s")
            ctx = bench / "tasks" / "task0007"
            base_tag = next(t for t in tags if ".base." in t)
            direct = timed(["docker", "build", "-q", "--build-arg", f"BASE_IMAGE={base_tag}",
                            "-f", str(ctx / "judge" / "Dockerfile"), "-t", f"{name}-direct:x",
                            str(ctx)])
            row("  reference: plain `docker build` of that judge (cache hit)", direct)
        finally:
            remove_images(name)


if __name__ == "__main__":
    main()
