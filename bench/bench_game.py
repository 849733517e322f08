"""Game session figures (issue: game tasks), side by side in one run, on EdgeBench's
number_guess:

- step round trip through the service (run-token auth, the step appended to the
  transcript before the reply, HTTP over the Unix socket and over loopback TCP) vs the
  same requests straight to the game server over the container's stdio, in one process:
  goal service ≤ 1.5 × direct + 5 ms (median);
- session start (fresh container up and its first line read) through the service, beside
  `docker run --rm -i --network none` of the same image and server to its first line.

The requests are {"guess": 0}: the game answers each with an error line and spends no
guess, so every step does the same work. The machine is shared: the load is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from common import row

from sforge.core.config import load_config
from sforge.plan.pipeline import Pipeline
from sforge.service.client import ServiceClient
from sforge.service.launch import start_service

REPO = Path(__file__).resolve().parents[1]
EDGEBENCH = REPO / "edgebench"
TASK = "number_guess"
REQUEST = b'{"guess": 0}'


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min) on {os.cpu_count()} cores"


def ms(values: list[float]) -> str:
    values = sorted(values)
    return (f"median {1000 * statistics.median(values):.2f} ms, "
            f"p90 {1000 * values[int(0.9 * (len(values) - 1))]:.2f} ms")


def direct_steps(pipe: Pipeline, n: int) -> list[float]:
    """Straight to a game server: the same container and stdio channel the service uses."""
    from sforge.containers.docker import engine
    from sforge.service.game_server import GameServer

    task = pipe.bench.tasks[TASK]
    server = GameServer(engine().client, pipe.refs[TASK]["judge"].tag, task,
                        Path(tempfile.mkdtemp()) / "direct.log", 65536)
    server.create_game(f"bench{uuid.uuid4().hex[:6]}", 1)
    try:
        server.attach_and_start()
        server.readline(60)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            server.send(REQUEST)
            server.readline(30)
            times.append(time.perf_counter() - t0)
        return times
    finally:
        server.close_channel()
        server.remove()


def service_steps(client: ServiceClient, n: int) -> list[float]:
    sess = client.new_game()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.step_raw(sess["id"], REQUEST)
        times.append(time.perf_counter() - t0)
    client.close_game(sess["id"])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per side and block")
    parser.add_argument("--starts", type=int, default=5, help="session starts per side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-game-") as tmp:
        tmp = Path(tmp)
        config = tmp / "config.yaml"
        config.write_text("games:\n  max_sessions_per_run: 1000\n  max_open: 4\n"
                          "  steps_per_s: 1000000\n")
        pipe = Pipeline.from_config(load_config(overrides={
            "benchmark": str(EDGEBENCH), "results": str(tmp / "results")}))
        svc = start_service(EDGEBENCH, tmp / "results", port=0,
                            socket=tmp / "sock" / "service.sock", config=config)
        try:
            admin = svc.client()
            _, token = admin.register_run(TASK, f"bench{uuid.uuid4().hex[:6]}",
                                          agent="bench", model="none")
            unix = ServiceClient(svc.address, token)
            tcp = ServiceClient(svc.url, token)
            unix.close_game(unix.new_game()["id"])  # the judge image built, caches warm
            direct, via_unix, via_tcp = [], [], []
            for _ in range(2):  # interleaved blocks: load changes hit every side alike
                direct += direct_steps(pipe, args.steps)
                via_unix += service_steps(unix, args.steps)
                via_tcp += service_steps(tcp, args.steps)
            print(f"step round trip, {2 * args.steps} steps per side; {load()}")
            d = statistics.median(direct)
            for label, times in (("straight to the game server (stdio)", direct),
                                 ("through the service, Unix socket", via_unix),
                                 ("through the service, loopback TCP", via_tcp)):
                med = statistics.median(times)
                goal = "" if times is direct else (
                    f"{med / d:.1f}x; goal ≤ {1000 * (1.5 * d + 0.005):.2f} ms "
                    f"({'met' if med <= 1.5 * d + 0.005 else 'MISSED'})")
                row(f"{label}: {ms(times)}", med, goal)

            starts, runs = [], []
            image = pipe.refs[TASK]["judge"].tag
            server = pipe.bench.tasks[TASK].game["server_cmd"]
            for _ in range(args.starts):
                t0 = time.perf_counter()
                sess = unix.new_game()
                starts.append(time.perf_counter() - t0)
                unix.close_game(sess["id"])
                t0 = time.perf_counter()
                proc = subprocess.Popen(["docker", "run", "--rm", "-i", "--network", "none",
                                         image, "sh", "-c", server],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                proc.stdout.readline()
                runs.append(time.perf_counter() - t0)
                proc.stdin.close()
                proc.wait()
            print(f"session start (container up, first line read), {args.starts} each; "
                  f"{load()}")
            row("service: POST /v1/games", statistics.median(starts), "(median)")
            row("`docker run --rm -i --network none` to the first line",
                statistics.median(runs), "(median)")
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
