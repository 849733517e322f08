#!/usr/bin/python3
"""Grader for `text_compression`: round-trip every hidden file through the submitted codec.

score = the total size in bytes of the compressed files (lower is better). A file that
does not round-trip exactly (an error, a timeout, wrong bytes) counts at its original size,
as if stored uncompressed; a missing codec.py therefore scores the corpus size, which the
rescale maps to 0.

Isolation: compress and decompress run in separate processes as `nobody`, which cannot
read /judge; between the two phases the grader kills every `nobody` process and deletes
every file `nobody` left behind, so decompress() sees nothing but its compressed input.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DATA = Path("/judge/data")
RUNNER = "/judge/bin/run_codec.py"
RESULT = Path("/opt/sforge/result.json")
NOBODY = 65534
TIME_LIMIT_S = 20.0  # per file and direction
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
       "PYTHONDONTWRITEBYTECODE": "1"}
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")


def write_result(**result: object) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


def parallelism() -> int:
    # SFORGE_CPUS is the container's CPU limit; nproc would report the host's cores.
    try:
        return max(1, int(float(os.environ.get("SFORGE_CPUS", "1"))))
    except ValueError:
        return 1


def as_nobody() -> dict[str, object]:
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def run(direction: str, data: bytes) -> tuple[bytes | None, str]:
    try:
        proc = subprocess.run(["/usr/bin/python3", RUNNER, direction], input=data,
                              capture_output=True, timeout=TIME_LIMIT_S, env=ENV,
                              **as_nobody())
    except subprocess.TimeoutExpired:
        return None, f"{direction}: time limit exceeded"
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return None, f"{direction}: exit code {proc.returncode}: {tail[0][:200]}"
    return proc.stdout, ""


def scrub() -> None:
    """Kill every process of `nobody` and delete every file it owns in writable places."""
    if os.geteuid() != 0:
        return
    for _ in range(50):
        pids = []
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                uid_line = next(x for x in status.read_text().splitlines()
                                if x.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if int(uid_line.split()[1]) == NOBODY:
                pids.append(int(status.parent.name))
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for top in [*SCRATCH, os.getcwd()]:
        for dirpath, dirnames, filenames in os.walk(top, topdown=True):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                try:
                    if os.lstat(path).st_uid != NOBODY:
                        continue
                except FileNotFoundError:
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            dirnames[:] = [d for d in dirnames if os.path.isdir(os.path.join(dirpath, d))]


def main() -> None:
    files = sorted(DATA.iterdir())
    originals = {p.name: p.read_bytes() for p in files}
    total_in = sum(map(len, originals.values()))
    if not Path("codec.py").is_file():
        write_result(score=total_in, valid=True, metrics={"original_bytes": total_in},
                     summary=f"no codec.py in the submission: scored as stored ({total_in} B)",
                     details=[{"name": n, "status": "FAILED", "score": len(d)}
                              for n, d in originals.items()])
        return
    # The submission must be readable, and not writable, by `nobody`.
    subprocess.run(["chown", "-R", "root:root", "."], check=False)
    subprocess.run(["chmod", "-R", "a+rX,go-w", "."], check=False)
    names = list(originals)
    with ThreadPoolExecutor(parallelism()) as pool:
        packed = dict(zip(names, pool.map(lambda n: run("compress", originals[n]), names),
                          strict=True))
    scrub()
    todo = [n for n in names if packed[n][0] is not None]
    with ThreadPoolExecutor(parallelism()) as pool:
        unpacked = dict(zip(todo, pool.map(lambda n: run("decompress", packed[n][0]), todo),
                            strict=True))
    scrub()
    details, total = [], 0
    for name in names:
        original = originals[name]
        blob, err = packed[name]
        if blob is not None:
            back, err = unpacked[name]
            if back is not None and back != original:
                err = "decompress(compress(x)) != x"
        if err:
            size, status, msg = len(original), "FAILED", f"{err}; counted as stored"
        else:
            size, status = len(blob), "PASSED"
            msg = f"{len(original)} -> {size} bytes ({8 * size / len(original):.3f} bits/byte)"
        total += size
        details.append({"name": name, "status": status, "score": size, "message": msg})
    ok = sum(d["status"] == "PASSED" for d in details)
    write_result(score=total, valid=True, details=details,
                 summary=f"{ok}/{len(details)} files round-trip; {total_in} -> {total} bytes "
                         f"({8 * total / total_in:.3f} bits/byte)",
                 metrics={"original_bytes": total_in, "round_trips": ok})


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a grader bug must still leave a verdict behind
        write_result(valid=False, summary=f"grader error: {exc!r}", details=[], metrics={})
        raise SystemExit(f"grader error: {exc!r}") from None
