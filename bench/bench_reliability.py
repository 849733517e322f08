"""Figures for the hostile cases (issue "nothing blocks"), each measured in this process:

  header bomb   a ~300 KB .tar.gz declaring a 300 MB GNU long name: time to refuse, RSS growth
  pax bomb      a 50 MB pax record: time to refuse
  claims        acquire + release of a per-key grading claim, per key (local filesystem)
  sweep         one sweep of stale judge containers (what every sforge command pays at start)
  sanitise      writing a result with 1,000 details and a 100 KB summary, capped

    .venv/bin/python bench/bench_reliability.py [--keys 2000]
"""

from __future__ import annotations

import argparse
import gzip
import resource
import tarfile
import tempfile
import time
from pathlib import Path

from sforge.benchmark.model import SubmissionRules
from sforge.grading import claims
from sforge.grading.archive import filter_submission
from sforge.grading.results import EvalResult


def _bomb(path: Path, kind: bytes, size: int) -> Path:
    head = tarfile.TarInfo("././@LongLink")
    head.type = kind
    head.size = size
    with gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write(head.tobuf(tarfile.USTAR_FORMAT))
        chunk = b"n" * (1 << 20)
        for _ in range(size >> 20):
            fh.write(chunk)
    return path


def _refuse(path: Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with filter_submission(path, SubmissionRules()) as filtered:
        reason = filtered.refused or "accepted"
    seconds = time.perf_counter() - t0
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return seconds, grown, reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bomb = _bomb(root / "longname.tar.gz", tarfile.GNUTYPE_LONGNAME, 300 << 20)
        s, mb, reason = _refuse(bomb)
        print(f"header bomb ({bomb.stat().st_size / 1024:.0f} KB, 300 MB name): refused in "
              f"{s:.3f} s, RSS +{mb:.1f} MB: {reason}")
        pax = _bomb(root / "pax.tar.gz", tarfile.XHDTYPE, 50 << 20)
        s, mb, reason = _refuse(pax)
        print(f"pax bomb ({pax.stat().st_size / 1024:.0f} KB, 50 MB record): refused in "
              f"{s:.3f} s, RSS +{mb:.1f} MB")

        t0 = time.perf_counter()
        for i in range(args.keys):
            claim, _ = claims.acquire(root / "evals" / f"{i}.claim", 600, lambda: None)
            assert claim is not None
            claims.release(claim)
        per = (time.perf_counter() - t0) / args.keys
        print(f"claims: acquire + release {per * 1e6:.0f} µs per key ({args.keys} keys)")

        big = EvalResult(task="t", submission="s" * 64, key="k" * 20, valid=True, score=1.0,
                         summary="x" * 100_000, details=[{"name": f"case {i}", "msg": "y" * 400}
                                                         for i in range(1000)])
        t0 = time.perf_counter()
        stored = big.write(root / "r.json")
        print(f"sanitise + write a 500 KB result: {(time.perf_counter() - t0) * 1e3:.1f} ms, "
              f"{(root / 'r.json').stat().st_size / 1024:.0f} KB stored, "
              f"{len(stored.details) - 1} of 1000 details kept")

    try:
        from sforge.containers.docker import engine
        from sforge.containers.owner import sweep_stale_containers

        eng = engine()
        sweep_stale_containers(eng)  # warm
        t0 = time.perf_counter()
        for _ in range(20):
            sweep_stale_containers(eng)
        print(f"sweep at command start: {(time.perf_counter() - t0) / 20 * 1e3:.1f} ms "
              "(one list call; a removal costs more)")
    except Exception as exc:  # noqa: BLE001 (no daemon: the other figures stand)
        print(f"sweep: no Docker daemon ({exc})")


if __name__ == "__main__":
    main()
