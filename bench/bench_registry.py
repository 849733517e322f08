"""The registry as a cache (issue: registry and CI): 50 tasks built and pushed to a real
registry on loopback (Debian's docker-registry); the daemon emptied; one task edited.
Wall time of that incremental `sforge build` beside a full build of the 50, in one run.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from common import remove_images, row, sforge, timed
from genbench import make_benchmark


def start_registry(root: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = root / "registry.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([shutil.which("docker-registry") or "docker-registry", "serve",
                             str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("docker-registry did not start")



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=50)
    args = ap.parse_args()
    name = f"regbench{int(time.time())}"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        registry, reg = start_registry(tmp)
        bench = tmp / "bench"
        make_benchmark(bench, args.n, name=name)
        try:
            full = timed(sforge(bench, tmp / "r-full", "--registry", reg, "build", "--push",
                                "-j", "2"))
            remove_images(name)
            run_sh = bench / "tasks" / "task0003" / "judge" / "run.sh"
            run_sh.write_text(run_sh.read_text() + "# edited\n")
            incremental = timed(sforge(bench, tmp / "r-fresh", "--registry", reg, "build",
                                       "--push", "-j", "2"))
            print(f"{args.n} tasks ({2 * args.n + 1} images), registry {reg}")
            row("full build + push of every image (cold daemon, empty registry)", full)
            row("fresh runner: empty daemon, warm registry, one task edited", incremental,
                f"{full / incremental:.1f}× faster")
        finally:
            remove_images(name)
            registry.terminate()


if __name__ == "__main__":
    main()
