"""Run one judge container on one submission archive and turn what it leaves into an EvalResult.

The judge run (the README, "Grading"): a fresh container from the judge image, the
filtered submission extracted into cwd, `[judge] cmd` run there under the task's CPU, memory and
network limits and wall clock, then /opt/sforge/result.json read back. Only the grader's verdict
(or sforge's verdict about the submission: timeout, OOM, no or bad result.json, refused archive)
becomes a result; Docker trouble raises InfrastructureError so no result file is written and the
next run retries. The container is always removed.

This module has no CLI concerns: a judge service calls `run_judge` directly.

Per-eval cost matters (thousands of evals): each eval costs the engine calls create,
put_archive (skipped for an empty submission), attach (only with a log_path), start, wait,
inspect, remove, and get_archive only where result.json cannot come out through the private
out directory (a remote daemon, an image without `head`, a judge that tampered with it, a
daemon that bounds the writable layer: the out directory would be a way around that bound).
`prepare_judge` does everything before start, so a batch prepares the next container while
the current judge runs.

Extraction stays with the engine's archive API (Docker's own untar, run with the daemon's
privileges). Extracting inside the container with its own tar was tried and is not used: the
judge's capability set has no FSETID, so a setgid bit on a directory whose group is not root's
is silently cleared (Docker keeps it), and busybox tar keeps neither symlink owners nor
directory mtimes; measured on this machine, put_archive costs no more than the extra tar
process would (0.54 s vs 0.53 s for create + extract + start + wait + remove at load 8).

Decisions:
* The entrypoint is a tiny `/bin/sh -c` setup step, then `exec /bin/sh -c "[judge] cmd"`. The
  setup removes whatever sits at /opt/sforge/result.json (file, directory, symlink, or
  /opt/sforge itself as a link or file) after extraction, so neither the image nor the archive
  can plant a result. If it cannot, it exits SETUP_FAILED_EXIT and the result is invalid.
  With a local daemon the judge command runs as the setup shell's child instead (not exec),
  so that shell can copy result.json into the private out directory after it (_SETUP_COPY);
  the exit code is passed on unchanged.
* The wall clock starts when `start` returns; on expiry the container is SIGKILLed at once
  (init=True: PID 1 is docker-init, so the whole tree dies) and the result is invalid.
* A refused archive (over the caps) is an invalid result without any container. So is a
  submission Docker cannot extract because it collides with the image (a directory where the
  image has a file): a verdict about the submission, not Docker trouble.
* A file that is not a tar archive (non-gzip garbage, empty, truncated) is the submission's
  invalid result with that reason, never an exception: one bad archive must not stop a batch.
* OOM-killed with no result.json: "killed: out of memory (limit …)". A result written despite
  an OOM kill of some child is kept, with oom_killed set.
* result.json over MAX_RESULT_BYTES, or not a regular file, is invalid. The judge's output is
  read live (attached before start, so the daemon stores none of it and its log rotation can
  drop nothing): the log keeps the first LOG_HEAD_BYTES and the last LOG_TAIL_BYTES with a
  "[sforge] … N bytes cut …" line between, and ends with "[sforge] …" lines saying how the run
  ended.
* The container trusts its judge less than Docker's defaults: no-new-privileges (setuid bits
  in a submission grant nothing), a pids limit, every capability dropped except JUDGE_CAPS,
  and a bound on its writable layer where the daemon supports one (overlay2 on xfs with
  pquota; elsewhere the memory limit and the wall clock are the only bounds).
* Containers carry labels sforge.grading.judge=1, owner pid, host, process start time and a deadline
  (epoch seconds), so `owner.sweep_stale_containers` removes those whose owner died on this
  host or whose deadline passed, from any sforge process, at its start.
* Every container call goes through a ContainerEngine (sforge.containers.engine): this module never
  speaks Docker's API, so it imports no Docker client library.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sforge import __version__
from sforge.benchmark.hashing import file_sha256
from sforge.benchmark.model import Task
from sforge.containers import owner
from sforge.containers.engine import (
    ContainerEngine,
    ContainerFile,
    ContainerSpec,
    EngineError,
    ExtractConflict,
    ImageMissing,
    Mount,
)
from sforge.core.errors import InfrastructureError
from sforge.core.fileio import HeadTail, open_regular
from sforge.core.units import parse_memory
from sforge.grading.archive import ArchiveError, ArchiveLimits, FilteredArchive, filter_submission
from sforge.grading.contract import limits_in_key
from sforge.grading.results import EvalResult, eval_key

log = logging.getLogger(__name__)

RESULT_DIR = "/opt/sforge"
RESULT_PATH = f"{RESULT_DIR}/result.json"
TASK_LABEL = "sforge.task"
KEY_LABEL = "sforge.key"  # the eval key: which result a container's run was for
MAX_RESULT_BYTES = 16 << 20
LOG_HEAD_BYTES = 8 << 20
LOG_TAIL_BYTES = 8 << 20
# Past the wall clock: time to create, extract, read back and remove before a sweep may kill.
DEADLINE_GRACE_S = 300
# What a grader running as root needs, and nothing more: hand files to an unprivileged user
# (CHOWN, FOWNER), read and clean whatever a submission left with odd modes (DAC_OVERRIDE),
# run submitted code as that user (SETUID, SETGID) and stop it (KILL). Dropped from Docker's
# defaults: MKNOD, NET_RAW, NET_BIND_SERVICE, SETPCAP, SETFCAP, FSETID, SYS_CHROOT, AUDIT_WRITE.
JUDGE_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")


@dataclass(frozen=True)
class ContainerLimits:
    """Per-container bounds: these defaults are the only ones; config.yaml's judge_limits
    overrides them (sforge.grading.contract.container_limits)."""

    pids: int = 4096  # processes + threads: a parallel build or a JVM test run fits
    writable: str | None = "10g"  # writable layer, where the storage driver can bound it


def lockdown(limits: ContainerLimits) -> dict[str, Any]:
    """ContainerSpec fields of every container from a judge image (judges, game servers)."""
    return {"no_new_privileges": True, "cap_add": JUDGE_CAPS, "pids": limits.pids}
# The setup step exits with this code if it cannot clear a planted result.json (then whatever
# is at RESULT_PATH was not written by the grader). A grader that itself exits 222 is judged
# invalid too: an accepted ambiguity, documented.
SETUP_FAILED_EXIT = 222

# Runs before [judge] cmd ("$1"), after the submission is in place: nothing the image or the
# submission planted at /opt/sforge (a result.json file, directory or symlink, or /opt/sforge
# itself as a symlink or file) survives, so only what runs after this can write the result.
_CLEAR = (
    f'd={RESULT_DIR}; '
    '{ { [ -d "$d" ] && [ ! -L "$d" ]; } || rm -rf "$d"; } '
    '&& rm -rf "$d/result.json" && mkdir -p "$d" && [ ! -e "$d/result.json" ] '
    f'|| {{ echo "sforge: cannot clear $d/result.json" >&2; exit {SETUP_FAILED_EXIT}; }}; '
)
_SETUP = _CLEAR + 'exec /bin/sh -c "$1"'
# Where a judge's private out directory (a host directory only sforge reads) is mounted.
OUT_DIR = "/run/sforge-out"
# The judge variant that hands result.json out through OUT_DIR: after [judge] cmd exits, what
# sits at RESULT_PATH is described in OUT_DIR/kind (file, symlink, dir, other, none) and, for a
# regular file, its first MAX_RESULT_BYTES + 1 bytes copied beside it; the judge's exit code is
# the container's, as with exec. The host reads that instead of asking the engine for the file
# (an archive round trip); whenever `kind` is missing or odd, it asks the engine after all.
_SETUP_COPY = _CLEAR + (
    '/bin/sh -c "$1"; c=$?; f=$d/result.json; o=' + OUT_DIR + '; '
    'if [ -L "$f" ]; then k=symlink; elif [ -d "$f" ]; then k=dir; '
    f'elif [ -f "$f" ]; then k=file; head -c {MAX_RESULT_BYTES + 1} "$f" > "$o/result.json" '
    '|| k=; elif [ -e "$f" ]; then k=other; else k=none; fi; '
    '[ -n "$k" ] && echo "$k" > "$o/kind"; exit $c'
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _fmt_num(value: float) -> str:
    """4.0 → '4', 0.5 → '0.5': how a person wrote it in task.toml."""
    return str(int(value)) if float(value).is_integer() else str(value)


class _LogWriter:
    """The judge's stdout+stderr to `path`: the first LOG_HEAD_BYTES straight to a temporary
    file, the last LOG_TAIL_BYTES in memory, a "… N bytes cut …" line between; the file
    appears (atomically) only at `finish`."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        self.fh = self.tmp.open("wb")
        self.out = HeadTail(self.fh, LOG_HEAD_BYTES, LOG_TAIL_BYTES)

    def feed(self, chunk: bytes) -> None:
        self.out.write(chunk)

    def finish(self, trailer: str) -> None:
        try:
            self.out.end()
            self.fh.write(trailer.encode())
            self.fh.close()
            os.replace(self.tmp, self.path)
        finally:
            self.discard()

    def discard(self) -> None:
        if not self.fh.closed:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)


def _archive_sha256(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError as exc:
        raise InfrastructureError(f"cannot read submission archive {path}: {exc}") from None


def _write_log(path: Path, chunks: Iterable[bytes], trailer: str) -> None:
    """The judge's output (head and tail kept), then sforge's own trailer lines."""
    writer = _LogWriter(path)
    try:
        for chunk in chunks:
            writer.feed(chunk)
        writer.finish(trailer)
    except BaseException:
        writer.discard()
        raise


def parse_result(raw: bytes) -> tuple[str | None, dict[str, Any]]:
    """The bytes of a grader's result.json → (why it is unusable or None, EvalResult fields).

    `valid: false` is no problem: it is the grader's verdict, kept with its summary. Fields
    hold what could be read (summary, details, metrics, valid, score) even when there is a
    problem, so feedback survives.
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"result.json is not valid JSON: {exc}", {}
    if not isinstance(data, dict):
        return f"result.json is not a JSON object (got {type(data).__name__})", {}
    fields: dict[str, Any] = {
        "summary": "" if data.get("summary") is None else str(data["summary"]),
        "details": data.get("details", []),
        "metrics": data.get("metrics", {}),
    }
    valid = data.get("valid")
    if "valid" not in data:
        return "result.json has no 'valid' field", fields
    if not isinstance(valid, bool):
        return f"result.json: 'valid' must be true or false, got {valid!r}", fields
    given = data.get("score")
    number = isinstance(given, int | float) and not isinstance(given, bool)
    score: Any = given
    if isinstance(given, int | float) and number:
        try:
            score = float(given)
        except OverflowError:
            score = math.inf
    finite = number and math.isfinite(score)
    fields["valid"] = valid
    fields["score"] = score if finite else None
    if not valid:
        return None, fields
    if "score" not in data:
        return "result.json: valid is true but there is no 'score'", fields
    if not number:
        return f"result.json: score must be a number, got {data['score']!r}", fields
    if not finite:
        return f"result.json: score must be finite, got {data['score']!r}", fields
    return None, fields


class _JudgeRun:
    """One container's life: create → extract → start → wait → read → (always) remove."""

    # Output read live by attaching before start (run). A subclass that starts its container
    # itself (the service's game servers) sets False: its log is read from the engine.
    LIVE_LOG = True

    def __init__(self, engine: ContainerEngine, image: str, task: Task,
                 timeout: float, log_path: Path | None, limits: ContainerLimits | None = None,
                 key: str = "", copy_out: bool = False):
        self.key = key
        self.limits = limits or ContainerLimits()
        # The out directory is a host directory the judge can write without bound: used only
        # where the engine does not bound the writable layer anyway (most daemons), so it
        # never opens a hole in a bound that holds.
        self.copy_out = copy_out and engine.shares_files and not (
            self.limits.writable and engine.bounds_writable)
        self.out: Path | None = None  # the private out directory, while the container lives
        self.engine = engine
        self.image = image
        self.task = task
        self.timeout = timeout
        self.log_path = log_path
        self.id: str | None = None
        self.log: _LogWriter | None = None
        self.reader: threading.Thread | None = None
        self.read_error: BaseException | None = None

    def _infra(self, what: str, exc: EngineError) -> InfrastructureError:
        daemon = self.engine.daemon
        if exc.unreachable:  # the message names the daemon already
            return InfrastructureError(f"{what} for judge image {self.image}: {exc}")
        return InfrastructureError(f"Docker daemon at {daemon}: {what} failed for judge "
                                   f"image {self.image}: {exc}")

    def spec(self, command: tuple[str, ...], **changes: Any) -> ContainerSpec:
        """The container of this judge image: the task's limits and cwd, the lockdown, the
        owner labels; `changes` for what a caller runs differently (a game server)."""
        judge, env = self.task.judge, self.task.environment
        fields: dict[str, Any] = {
            "image": self.image, "command": command, "cwd": env.cwd,
            "env": {"SFORGE_CPUS": _fmt_num(judge.cpus), "SFORGE_MEMORY": judge.memory},
            "labels": {**owner.labels(), TASK_LABEL: self.task.id},
            "cpus": judge.cpus, "memory": parse_memory(judge.memory),
            "network": "bridge" if judge.internet else "none", **lockdown(self.limits)}
        fields.update(changes)
        return ContainerSpec(**fields)

    def create_spec(self, spec: ContainerSpec, what: str = "creating the judge container"
                    ) -> None:
        try:
            self.id = self.engine.create_container(spec)
        except ImageMissing:
            raise InfrastructureError(f"judge image {self.image} not found on the Docker "
                                      f"daemon at {self.engine.daemon}; build it first") from None
        except EngineError as exc:
            raise self._infra(what, exc) from None

    def create(self) -> None:
        deadline = time.time() + self.timeout + DEADLINE_GRACE_S
        setup, mounts = _SETUP, tuple[Mount, ...]()
        if self.copy_out:
            self.out = owner.private_dir()  # 0700: ours alone; swept if we are killed
            setup, mounts = _SETUP_COPY, (Mount(str(self.out), OUT_DIR, read_only=False),)
        spec = self.spec(("/bin/sh", "-c", setup, "sforge-judge", self.task.judge.cmd),
                         labels={**owner.labels(deadline=deadline), TASK_LABEL: self.task.id,
                                 KEY_LABEL: self.key},
                         writable=self.limits.writable, mounts=mounts)
        if not mounts:
            return self.create_spec(spec)
        try:
            self.create_spec(spec)
        except InfrastructureError as exc:
            # The daemon cannot bind this machine's directory (a socket forwarded from
            # another host, a desktop VM not sharing the temp dir): the archive API then.
            if "mount" not in str(exc).lower() and "bind" not in str(exc).lower():
                raise
            log.info("judge results through the engine's archive API: %s", exc)
            shutil.rmtree(self.out, ignore_errors=True)  # type: ignore[arg-type]
            self.out = None
            self.create_spec(dataclasses.replace(
                spec, command=("/bin/sh", "-c", _SETUP, "sforge-judge", self.task.judge.cmd),
                mounts=()))
        return None

    def extract(self, filtered: FilteredArchive) -> str | None:
        """Put the filtered submission into cwd; a collision with the image is a verdict."""
        if not filtered.members:
            return None
        assert self.id is not None
        data: Any = filtered.read_bytes() if filtered.size <= (64 << 20) else filtered.data
        cwd = self.task.environment.cwd
        try:
            self.engine.put_archive(self.id, cwd, data)
        except ExtractConflict as exc:
            return f"could not extract the submission into {cwd}: {exc}"
        except EngineError as exc:
            raise self._infra("extracting the submission", exc) from None
        return None

    def attach(self) -> None:
        """Read the judge's output from before its first byte, in a thread, into the log."""
        if self.log_path is None:
            return
        assert self.id is not None
        try:
            stream = self.engine.attach_output(self.id)
        except EngineError as exc:
            raise self._infra("attaching to the judge", exc) from None
        self.log = _LogWriter(self.log_path)

        def pump() -> None:
            try:
                for chunk in stream:
                    self.log.feed(chunk)  # type: ignore[union-attr]
            except BaseException as exc:  # noqa: BLE001 (reported after the run)
                self.read_error = exc

        self.reader = threading.Thread(target=pump, name="sforge-judge-log", daemon=True)
        self.reader.start()

    def run(self) -> tuple[bool, float, str, str]:
        """Start and wait up to the wall clock; kill at once on expiry. → timed_out, …"""
        assert self.id is not None
        started_at = _now()
        t0 = time.monotonic()
        try:
            self.attach()
            self.engine.start(self.id)
            # the clock runs from here: start-up is the engine's time
            timed_out = self.engine.wait(self.id, self.timeout) is None
            if timed_out:
                self.engine.kill(self.id)
        except EngineError as exc:
            raise self._infra("running the judge", exc) from None
        return timed_out, time.monotonic() - t0, started_at, _now()

    def inspect_state(self) -> dict[str, Any]:
        assert self.id is not None
        try:
            return self.engine.container_state(self.id)
        except EngineError as exc:
            raise self._infra("inspecting the judge container", exc) from None

    def read_result(self) -> tuple[str | None, dict[str, Any], bool]:
        """→ (problem, fields, present). Reads RESULT_PATH from the exited container."""
        assert self.id is not None
        known, found = _read_out(self.out) if self.out is not None else (False, None)
        try:
            if not known:
                found = self.engine.read_file(self.id, RESULT_PATH, MAX_RESULT_BYTES)
        except EngineError as exc:
            raise self._infra("reading result.json", exc) from None
        if found is None:
            return None, {}, False
        if found.kind == "dir":
            return "result.json is a directory, not a file", {}, True
        if found.kind == "symlink":
            return "result.json is a symlink, not a file", {}, True
        if found.kind == "too large":
            return f"result.json is larger than {MAX_RESULT_BYTES} bytes", {}, True
        if found.kind != "file":
            return "result.json is not a regular file", {}, True
        problem, fields = parse_result(found.data)
        return problem, fields, True

    def write_log(self, trailer: str) -> None:
        if self.log_path is None:
            return
        if self.log is None and not self.LIVE_LOG and self.id is not None:
            try:
                _write_log(self.log_path, self.engine.output(self.id), trailer)
            except EngineError as exc:
                raise self._infra("reading the container's logs", exc) from None
            return
        if self.log is None:  # never started: only sforge's lines
            _write_log(self.log_path, (), trailer)
            return
        if self.reader is not None:
            self.reader.join(timeout=30)
            if self.reader.is_alive():
                trailer = "\n[sforge] output still open 30 s after the judge ended: log cut here" \
                    + trailer
        if self.read_error is not None and not isinstance(self.read_error, EngineError):
            raise self.read_error
        writer, self.log = self.log, None
        writer.finish(trailer)

    def remove(self) -> None:
        if self.log is not None:
            self.log.discard()
        if self.out is not None:
            shutil.rmtree(self.out, ignore_errors=True)
            self.out = None
        if self.id is None:
            return
        try:
            self.engine.remove_container(self.id)
        except EngineError as exc:  # never mask the real outcome; the sweep removes it later
            log.warning("could not remove judge container %s: %s", self.id[:12], exc)


def _read_out(out: Path) -> tuple[bool, ContainerFile | None]:
    """What the judge's setup step left in its out directory → (known, file). Not known
    (marker missing, unreadable, or anything but the regular files the step writes): the
    caller asks the engine for result.json instead, so an odd directory never decides."""
    kind = _read_regular(out / "kind", 16)
    if kind is None:
        return False, None
    name = kind.decode(errors="replace").strip()
    if name == "none":
        return True, None
    if name in ("symlink", "dir", "other"):
        return True, ContainerFile(name)
    if name != "file":
        return False, None
    data = _read_regular(out / "result.json", MAX_RESULT_BYTES + 1)
    if data is None:
        return False, None
    return True, ContainerFile("too large") if len(data) > MAX_RESULT_BYTES \
        else ContainerFile("file", data)


def _read_regular(path: Path, cap: int) -> bytes | None:
    """Up to `cap` bytes of a regular file, never through a symlink; None otherwise."""
    try:
        fd, _ = open_regular(path, follow=False)
    except OSError:
        return None
    try:
        chunks, left = [], cap
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def run_judge(engine: ContainerEngine, image: str, task: Task, archive: Path, *,
              limits: ArchiveLimits | None = None, timeout: float | None = None,
              log_path: Path | None = None, key: str | None = None,
              submission: str | None = None,
              container_limits: ContainerLimits | None = None,
              copy_out: bool = True) -> EvalResult:
    """Grade `archive` with the judge `image` of `task`; return the verdict as an EvalResult.

    `submission` is the archive's sha256 and `key` the eval key; both are computed when not
    given (the caller usually has them: `Pipeline.eval_target`; computed, the key holds
    `limits` and `container_limits` as sforge.grading.contract.limits_in_key says).
    `timeout` overrides `[judge] timeout_sec`. `log_path` receives the judge's stdout and
    stderr, followed by a few "[sforge]" lines. `copy_out`: on a local engine, result.json
    comes out through a private bind-mounted directory (one archive round trip less; the
    same verdict, tests/integration/test_judge.py proves it); False: always through the
    engine's API.

    Raises InfrastructureError (Docker trouble, an archive that cannot be opened); every
    other outcome, including archives that are not tar archives, refused archives, timeouts
    and OOM kills, is a result.
    """
    with prepare_judge(engine, image, task, archive, limits=limits, timeout=timeout,
                       log_path=log_path, key=key, submission=submission,
                       container_limits=container_limits, copy_out=copy_out) as prepared:
        return prepared.run()


class PreparedJudge:
    """A judge container created, its submission extracted, not started yet (or a verdict
    already reached without one: a refused archive, a collision with the image).

    `run()` starts it, waits, reads the result and removes the container; `close()` (or
    leaving the `with`) removes a container that was never run. Preparing the next eval
    while the current one runs hides create + extract behind the judge's own time.
    """

    def __init__(self, run: _JudgeRun | None, result: Callable[..., EvalResult],
                 rejected: list, verdict: EvalResult | None = None):
        self._run = run
        self._result = result
        self._rejected = rejected
        self.verdict = verdict  # set when no container needs to run

    def run(self, on_exit: Callable[[], None] | None = None) -> EvalResult:
        """`on_exit()` is called as soon as the judge has stopped (exited, or killed at its
        wall clock), before its result is read and its container removed: a batch starts
        the next judge then."""
        if self.verdict is not None:
            return self.verdict
        assert self._run is not None, "a prepared judge runs once"
        run, self._run = self._run, None
        try:
            return _finish(run, self._rejected, self._result, on_exit)
        finally:
            run.remove()

    def close(self) -> None:
        if self._run is not None:
            run, self._run = self._run, None
            run.remove()

    def __enter__(self) -> PreparedJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prepare_judge(engine: ContainerEngine, image: str, task: Task, archive: Path, *,
                  limits: ArchiveLimits | None = None, timeout: float | None = None,
                  log_path: Path | None = None, key: str | None = None,
                  submission: str | None = None,
                  container_limits: ContainerLimits | None = None,
                  copy_out: bool = True) -> PreparedJudge:
    """Filter `archive`, create the judge container and extract the submission into it:
    everything of `run_judge` before the judge starts (same arguments, same errors)."""
    archive = Path(archive)
    submission = submission or _archive_sha256(archive)
    settings = task.judge_settings()
    wall = float(timeout if timeout is not None else task.judge.timeout_sec)
    key = key or eval_key(image, submission, settings,
                          limits=limits_in_key(limits, container_limits))

    try:
        filtered = filter_submission(archive, task.submission, limits, task.environment.cwd)
    except ArchiveError as exc:  # not a tar archive: this submission's verdict
        filtered = FilteredArchive(data=io.BytesIO(), size=0,
                                   refused=str(exc).replace(f" {archive}", ""))
    with filtered:
        def result(**fields: Any) -> EvalResult:
            fields.setdefault("score", None)
            fields.setdefault("summary", fields.get("reason") or "")
            if filtered.warnings:  # said where people look: the summary
                fields["summary"] = " ".join([*(f"[sforge: {w}]" for w in filtered.warnings),
                                              fields["summary"]]).strip()
            return EvalResult(task=task.id, submission=submission, key=key,
                              judge_image=image, judge_settings=settings,
                              sforge_version=__version__, changed=filtered.changed,
                              warnings=filtered.warnings,
                              log=str(log_path) if log_path else None, **fields)

        if filtered.refused:
            now = _now()
            if log_path is not None:
                _write_log(log_path, (), f"[sforge] archive refused: {filtered.refused}\n")
            return PreparedJudge(None, result, filtered.rejected, result(
                valid=False, reason=filtered.refused, rejected=filtered.rejected,
                started_at=now, finished_at=now))
        run = _JudgeRun(engine, image, task, wall, log_path,
                        container_limits or ContainerLimits(), key, copy_out)
        try:
            run.create()
            conflict = run.extract(filtered)
        except BaseException:
            run.remove()
            raise
        if conflict:
            try:
                now = _now()
                run.write_log(f"[sforge] {conflict}\n")
            finally:
                run.remove()
            return PreparedJudge(None, result, filtered.rejected, result(
                valid=False, reason=conflict, rejected=filtered.rejected, started_at=now,
                finished_at=now))
        return PreparedJudge(run, result, filtered.rejected)


def _finish(run: _JudgeRun, rejected: list, result: Callable[..., EvalResult],
            on_exit: Callable[[], None] | None = None) -> EvalResult:
    """Start the prepared container, wait, and turn what it leaves into the verdict."""
    timed_out, duration, started_at, finished_at = run.run()
    if on_exit is not None:
        on_exit()
    common = {"rejected": rejected, "duration_s": round(duration, 3),
              "started_at": started_at, "finished_at": finished_at}
    if timed_out:
        reason = f"timed out after {_fmt_num(run.timeout)} s"
        run.write_log(f"\n[sforge] {reason}: killed\n")
        return result(valid=False, reason=reason, timed_out=True, **common)
    state = run.inspect_state()
    exit_code = state.get("ExitCode")
    oom = bool(state.get("OOMKilled"))
    problem, fields, present = run.read_result()
    memory = run.task.judge.memory
    if exit_code == SETUP_FAILED_EXIT:
        problem, fields = f"judge setup failed: could not clear {RESULT_PATH}", {}
    elif not present:
        problem = (f"killed: out of memory (limit {memory})" if oom else
                   f"no {RESULT_PATH} (judge exited with code {exit_code})")
    elif problem and oom:
        problem = f"killed: out of memory (limit {memory}); {problem}"
    trailer = f"\n[sforge] judge exited with code {exit_code} after {duration:.2f} s"
    trailer += " (out of memory)" if oom else ""
    run.write_log(trailer + (f"; invalid: {problem}" if problem else "") + "\n")
    common.update(exit_code=exit_code, oom_killed=oom)
    if problem:
        fields.pop("valid", None)
        fields.pop("summary", None)
        return result(valid=False, reason=problem, **fields, **common)
    return result(**fields, **common)


def docker_run_args(task: Task, limits: ContainerLimits | None = None) -> list[str]:
    """`docker run` flags giving a container what a judge container of `task` gets (limits,
    lockdown, network, cwd, environment): the floor the grading figures are measured
    against. (The writable-layer bound is left out: most daemons cannot apply it.)"""
    judge = task.judge
    memory = str(parse_memory(judge.memory))
    locked = lockdown(limits or ContainerLimits())
    return ["--init", "--cpus", _fmt_num(judge.cpus), "--memory", memory,
            "--memory-swap", memory, "--network", "bridge" if judge.internet else "none",
            "--log-driver", "none", "--security-opt", "no-new-privileges",
            "--cap-drop", "ALL", *[f"--cap-add={c}" for c in locked["cap_add"]],
            "--pids-limit", str(locked["pids"]),
            "-w", task.environment.cwd, "-e", f"SFORGE_CPUS={_fmt_num(judge.cpus)}",
            "-e", f"SFORGE_MEMORY={judge.memory}"]
