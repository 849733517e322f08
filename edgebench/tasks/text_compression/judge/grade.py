#!/usr/bin/python3
"""Grader for `text_compression`: round-trip every hidden file through the submitted codec.

score = the total size in bytes of the compressed files (lower is better). A file that
does not round-trip exactly (an error, a timeout, wrong bytes, more than output_limit()
bytes written by either direction) counts at its original size, as if stored uncompressed;
a missing codec.py therefore scores the corpus size, which the rescale maps to 0.

Output: bin/run_codec.py's stdout carries the returned bytes only (the codec's own prints
go to stderr). The grader reads at most output_limit() bytes of it, and a runner that
writes more is killed on the spot, so no codec output can exhaust the grader's memory.

Isolation: compress and decompress run in separate processes as `nobody`, which cannot
read /judge. Between the two phases the grader kills every `nobody` process, removes every
SysV IPC object (shared memory, semaphore set, message queue) and every file `nobody` left
behind (POSIX shared memory and message queues are files in /dev/shm and /dev/mqueue), then
checks that none of it survived: no `nobody` process, no SysV IPC object that was not there
when the grader started, no path owned by `nobody` anywhere but /proc, /sys and the
devices in /dev. If anything survived, the result is invalid, never a score, so
decompress() gets its compressed input and none of the state the scrub removes. Kernel
state the container shares and no unprivileged scrub resets (the page cache) stays a
channel of a few hundred bytes: NOTES.md, "Known issues".
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
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
MAX_EXTRA_OUTPUT = 1 << 20  # output_limit(): 4× the original file + this
MAX_STDERR_TAIL = 4000  # bytes of a runner's stderr kept for its failure message
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
       "PYTHONDONTWRITEBYTECODE": "1"}
# Every folder `nobody` can write in the judge image (POSIX shm and semaphores live in
# /dev/shm, POSIX message queues in /dev/mqueue); scrub() checks the whole filesystem.
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
SYSV_IPC = ("shm", "sem", "msg")


def write_result(**result: object) -> None:
    """Write result.json with the given fields."""
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


def parallelism() -> int:
    """How many files run at a time: SFORGE_CPUS, the container's CPU limit (not nproc)."""
    try:
        return max(1, int(float(os.environ.get("SFORGE_CPUS", "1"))))
    except ValueError:
        return 1


def as_nobody() -> dict[str, object]:
    """Popen arguments that run a command as `nobody` (none when the grader is not root)."""
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def output_limit(original: bytes) -> int:
    """The most bytes either direction of one file may write to stdout: 4× the original + 1 MiB."""
    return 4 * len(original) + MAX_EXTRA_OUTPUT


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL the runner's process group and reap the runner."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def run(direction: str, data: bytes, limit: int) -> tuple[bytes | None, str]:
    """The codec's `direction` output for `data`, or None and why (error, timeout, > `limit` B)."""
    # Past `limit` bytes of stdout the runner is killed at once: at most `limit` + 64 KiB held.
    proc = subprocess.Popen(["/usr/bin/python3", RUNNER, direction], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                            start_new_session=True, **as_nobody())
    deadline = time.monotonic() + TIME_LIMIT_S
    out, err, sent = bytearray(), b"", 0
    sel = selectors.DefaultSelector()
    try:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None, f"{direction}: time limit exceeded"
            for key, _ in sel.select(left):
                if key.fileobj is proc.stdin:
                    try:
                        sent += os.write(key.fd, data[sent:sent + 65536])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > limit:
                        return None, f"{direction}: over {limit} bytes of output"
                else:
                    err = (err + chunk)[-MAX_STDERR_TAIL:]
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None, f"{direction}: time limit exceeded"
    finally:
        sel.close()
        stop(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                pipe.close()
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return None, f"{direction}: exit code {proc.returncode}: {tail[0][:200]}"
    return bytes(out), ""


class ScrubError(Exception):
    """State of `nobody` survived a scrub: decompress() could see more than its input."""


def nobody_pids() -> list[int]:
    """Every process with `nobody` among its real, effective, saved or filesystem uids, except
    exited single-threaded ones awaiting their parent (such a zombie holds no state)."""
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines()
                          if ":" in line)
        except OSError:
            continue
        if NOBODY not in map(int, fields.get("Uid", "").split()):
            continue
        zombie = fields.get("State", "").split()[:1] == ["Z"]
        if zombie and fields.get("Threads", "").strip() == "1":
            continue
        pids.append(int(status.parent.name))
    return pids


def kill_nobody() -> None:
    """SIGKILL every process of `nobody` until none is left (at most 50 rounds)."""
    for _ in range(50):
        pids = nobody_pids()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def sysv_ipc() -> dict[tuple[str, int], dict[str, str]]:
    """Every SysV IPC object in the container's IPC namespace: (kind, id) → its columns."""
    objects = {}
    for kind in SYSV_IPC:
        header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        names = header.split()
        for row in rows:
            cols = dict(zip(names, row.split(), strict=False))
            objects[(kind, int(row.split()[1]))] = cols
    return objects


def remove_sysv_ipc() -> None:
    """Remove the SysV IPC objects `nobody` owns or created. IPC_RMID needs the owner's or the
    creator's uid (root lacks CAP_SYS_ADMIN and CAP_IPC_OWNER here), so ipcrm runs as
    `nobody`; it removes exactly what that uid may remove."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["/usr/bin/ipcrm", "--all"], env=ENV, capture_output=True,
                       timeout=TIME_LIMIT_S, **as_nobody())
    kill_nobody()


def remove_files() -> None:
    """Delete every path `nobody` owns in SCRATCH and cwd."""
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
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            dirnames[:] = [d for d in dirnames if os.path.isdir(os.path.join(dirpath, d))]


def nobody_paths(limit: int = 5) -> list[str]:
    """Up to `limit` paths owned by `nobody`: the whole filesystem but /proc, /sys and /dev,
    plus the writable folders under /dev."""
    found: list[str] = []
    tops = ["/", *(t for t in SCRATCH if t.startswith("/dev/"))]
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top, topdown=True):
            if dirpath == "/":
                dirnames[:] = [d for d in dirnames if d not in ("proc", "sys", "dev")]
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                with contextlib.suppress(FileNotFoundError):
                    if os.lstat(path).st_uid == NOBODY:
                        found.append(path)
                        if len(found) >= limit:
                            return found
    return found


def leftovers(ipc_before: dict[tuple[str, int], dict[str, str]]) -> list[str]:
    """What of `nobody` is left: processes, SysV IPC objects not in `ipc_before`, paths."""
    left = [f"process {pid}" for pid in nobody_pids()]
    left += [f"SysV {kind} {ident} (uid {cols.get('uid')}, creator {cols.get('cuid')})"
             for (kind, ident), cols in sysv_ipc().items() if (kind, ident) not in ipc_before]
    left += [f"file {path}" for path in nobody_paths()]
    return left


def scrub(ipc_before: dict[tuple[str, int], dict[str, str]], check: bool = True) -> None:
    """Kill every process of `nobody`, then remove its SysV IPC objects and every file it owns
    in writable places. With `check`, raise ScrubError unless no `nobody` process, no SysV
    IPC object absent from `ipc_before` and no path owned by `nobody` is left."""
    if os.geteuid() != 0:
        return
    kill_nobody()
    if sysv_ipc().keys() - ipc_before.keys():
        remove_sysv_ipc()
    remove_files()
    if check and (left := leftovers(ipc_before)):
        raise ScrubError(", ".join(left[:5]) + (f" and {len(left) - 5} more"
                                                if len(left) > 5 else ""))


def main() -> None:
    """Grade ./codec.py on every file of DATA and write result.json."""
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
    limits = {n: output_limit(d) for n, d in originals.items()}
    ipc_before = sysv_ipc()
    with ThreadPoolExecutor(parallelism()) as pool:
        packed = dict(zip(names, pool.map(
            lambda n: run("compress", originals[n], limits[n]), names), strict=True))
    try:
        scrub(ipc_before)
    except ScrubError as exc:
        write_result(valid=False, details=[], metrics={"original_bytes": total_in},
                     summary=f"state of the compress phase survived the scrub: {exc}")
        return
    todo = [n for n in names if packed[n][0] is not None]
    with ThreadPoolExecutor(parallelism()) as pool:
        unpacked = dict(zip(todo, pool.map(
            lambda n: run("decompress", packed[n][0], limits[n]), todo), strict=True))
    scrub(ipc_before, check=False)
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
