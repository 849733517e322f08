"""Per-key grading claims (sforge.grading.claims): exclusive, released only by their holder, taken
over from dead owners and past deadlines, and, raced by several processes, each key made once."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from sforge.grading import claims


def test_exclusive_and_released_only_by_holder(tmp_path: Path) -> None:
    path = tmp_path / "k.claim"
    first = claims.try_claim(path, 60)
    assert first is not None and claims.try_claim(path, 60) is None
    record = claims.read_claim(path)
    assert record["pid"] == str(os.getpid()) and record["token"] == first.token
    assert claims.stale_reason(path, record) is None  # we are alive, within the deadline
    claims.release(claims.Claim(path, "not-mine", 0))
    assert path.exists()
    claims.release(first)
    assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary files left


def test_dead_owner_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "k.claim"
    code = ("import sys; from sforge.grading import claims; "
            "assert claims.try_claim(sys.argv[1], 3600)")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    record = claims.read_claim(path)
    assert claims.stale_reason(path, record) == "owner process dead"
    claim, product = claims.acquire(path, 60, lambda: None)
    assert claim is not None and product is None
    assert claims.read_claim(path)["token"] == claim.token


def test_passed_deadline_taken_over_even_from_a_live_owner(tmp_path: Path) -> None:
    path = tmp_path / "k.claim"
    old = claims.try_claim(path, -1)
    assert old is not None
    assert claims.stale_reason(path, claims.read_claim(path)) == "deadline passed"
    claim, _ = claims.acquire(path, 60, lambda: None)
    assert claim is not None and claim.token != old.token
    claims.release(old)  # the overrunning holder finishes late: it removes nothing
    assert claims.read_claim(path)["token"] == claim.token


def test_other_host_owner_waits_for_its_deadline(tmp_path: Path) -> None:
    path = tmp_path / "k.claim"
    path.write_text(json.dumps({"host": "elsewhere", "pid": "1", "token": "t",
                                "deadline": time.time() + 60}))
    assert claims.stale_reason(path, claims.read_claim(path)) is None


def test_waits_for_a_live_holder_and_returns_its_product(tmp_path: Path) -> None:
    path = tmp_path / "k.claim"
    product = tmp_path / "k.json"
    held = claims.try_claim(path, 60)

    def finish() -> None:
        time.sleep(0.5)
        product.write_text("done")
        claims.release(held)

    threading.Thread(target=finish).start()
    t0 = time.monotonic()
    claim, got = claims.acquire(path, 60, lambda: product.read_text() if product.exists()
                                else None)
    assert claim is None and got == "done" and time.monotonic() - t0 >= 0.4


def _worker(root: str, keys: int, barrier) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    for i in range(keys):
        out = Path(root) / f"{i}.out"
        claim, _ = claims.acquire(Path(root) / f"{i}.claim", 60,
                                  lambda out=out: out.read_text() if out.exists() else None)
        if claim is None:
            continue
        with open(Path(root) / f"{i}.log", "a") as fh:
            fh.write(f"{os.getpid()}\n")
        tmp = out.with_suffix(".tmp")
        tmp.write_text("x")
        os.replace(tmp, out)
        claims.release(claim)


def test_racing_processes_make_each_key_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), 40, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for i in range(40):
        assert len((tmp_path / f"{i}.log").read_text().splitlines()) == 1
    assert not list(tmp_path.glob("*.claim")) and not list(tmp_path.glob(".*"))
