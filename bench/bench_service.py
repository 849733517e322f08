"""Judge service figures (issue: the judge service), each side by side in one run.

- overhead: 100 archives of a trivial judge through the service (capacity 2) vs
  `sforge grade -j 2` of the same 100 archives, separate results directories: ≤ 1.15×;
- burst: 500 small submissions from 50 concurrent clients, a judge that works 0.5 s,
  capacity 2 and a short queue: no 5xx but 503, every accepted one graded, the service
  process's own CPU ≤ 10 % of the wall time;
- a resubmitted (already graded) archive answered in ≤ 50 ms, measured at the client.

The machine is shared: the load average is printed beside each figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from common import remove_images, row, sforge, tar_gz, timed
from genbench import make_benchmark

from sforge.service.client import ServiceClient, ServiceError
from sforge.service.launch import start_service


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min) on {os.cpu_count()} cores"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cleanup(name: str) -> None:
    remove_images(name)


def overhead(tmp: Path, n: int) -> None:
    name = f"svcbench{int(time.time())}"
    bench = tmp / "b1"
    tasks = make_benchmark(bench, 1, name=name)
    archives = [tar_gz(f"{i % 10}.{i}") for i in range(n)]
    try:
        timed(sforge(bench, tmp / "r-grade", "build", "-j", "2"))
        for i, data in enumerate(archives):
            path = bench / "submissions" / "batch" / tasks[0] / f"run{i}.tar.gz"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        print(f"service overhead: {n} archives, trivial judge, capacity 2 ({load()})")
        grade = timed(sforge(bench, tmp / "r-grade", "grade", "-j", "2"))
        # the batch directory must not be seen by the service side's `report` later
        for path in (bench / "submissions").rglob("*.tar.gz"):
            path.unlink()
        handle = start_service(bench, tmp / "r-svc", port=0, max_concurrent=2,
                               max_pending=n)
        try:
            admin = handle.client()
            admin.register_run(tasks[0], "warm")  # nothing graded: just the HTTP path
            _, token = admin.register_run(tasks[0], "batch")
            client = ServiceClient(handle.url, token)
            start = time.perf_counter()
            subs = [client.submit(a) for a in archives]
            results = [client.wait(s["id"])["result"] for s in subs]
            service = time.perf_counter() - start
            assert all(r["valid"] for r in results), "every archive should grade valid"
            row(f"`sforge grade -j 2` of {n} archives", grade, "(process start included)")
            row(f"service, capacity 2: {n} submitted, all verdicts back", service,
                f"{service / grade:.2f}× grade (goal ≤ 1.15×)")
            again = []
            for data in archives[:20]:
                t0 = time.perf_counter()
                sub = client.submit(data)
                again.append(time.perf_counter() - t0)
                assert sub["state"] == "done" and sub["from_store"]
            print(f"resubmitted (already graded) archive, 20 times, at the client ({load()})")
            row("  median", statistics.median(again), "goal ≤ 0.050 s")
            row("  max", max(again))
        finally:
            handle.stop()
    finally:
        cleanup(name)


def burst(tmp: Path, n: int, clients: int, pending: int) -> None:
    name = f"svcburst{int(time.time())}"
    bench = tmp / "b2"
    tasks = make_benchmark(bench, 1, name=name, work_s=0.5, cpus=1)
    try:
        timed(sforge(bench, tmp / "r-burst", "build", "-j", "2"))
        handle = start_service(bench, tmp / "r-burst", port=0, max_concurrent=2,
                               max_pending=pending)
        admin = handle.client()
        tokens = [admin.register_run(tasks[0], f"c{c}")[1] for c in range(clients)]
        per = n // clients
        stats = {"accepted": 0, "graded": 0, "retries": 0, "errors": []}
        lock = threading.Lock()

        def one(c: int) -> None:
            client = ServiceClient(handle.url, tokens[c])
            for k in range(per):
                try:
                    sub = client.submit(tar_gz(f"{c}.{k}"))
                    with lock:
                        stats["accepted"] += 1
                    done = client.wait(sub["id"])
                    with lock:
                        stats["graded"] += done["state"] == "done" and done["result"] is not None
                except ServiceError as exc:
                    with lock:
                        stats["errors"].append(exc.status)
            with lock:
                stats["retries"] += client.retries

        print(f"burst: {per * clients} submissions from {clients} clients, 0.5 s judge, "
              f"capacity 2, max-pending {pending} ({load()})")
        cpu0 = cpu_seconds(handle.process.pid)
        start = time.perf_counter()
        threads = [threading.Thread(target=one, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        cpu = cpu_seconds(handle.process.pid) - cpu0
        metrics = admin.metrics()
        handle.stop()
        five_xx = [s for s in stats["errors"] if s >= 500 and s != 503]
        row("wall time", wall, f"ideal {per * clients * 0.5 / 2:.0f} s of judge work")
        row("service process CPU", cpu, f"{100 * cpu / wall:.1f} % of wall (goal ≤ 10 %)")
        print(f"  accepted {stats['accepted']}, graded {stats['graded']}, 503s waited out "
              f"{stats['retries']} (service counted {metrics['rejected_by_status']}), "
              f"other errors {stats['errors'] or 'none'}, 5xx other than 503: "
              f"{len(five_xx)} ({load()})")
    finally:
        cleanup(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="archives for the overhead figure")
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--pending", type=int, default=20,
                        help="max-pending in the burst (small, so 503s happen)")
    parser.add_argument("--skip-burst", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sforge-bench-service-") as tmp:
        if not args.skip_overhead:
            overhead(Path(tmp), args.n)
        if not args.skip_burst:
            burst(Path(tmp), args.burst, args.clients, args.pending)


if __name__ == "__main__":
    main()
