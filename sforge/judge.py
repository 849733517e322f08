"""Run one judge container on one submission archive and turn what it leaves into an EvalResult.

The judge run (the README, "Grading"): a fresh container from the judge image, the
filtered submission extracted into cwd, `[judge] cmd` run there under the task's CPU, memory and
network limits and wall clock, then /opt/sforge/result.json read back. Only the grader's verdict
(or sforge's verdict about the submission: timeout, OOM, no or bad result.json, refused archive)
becomes a result; Docker trouble raises InfrastructureError so no result file is written and the
next run retries. The container is always removed.

This module has no CLI concerns: a judge service calls `run_judge` directly.

Per-eval cost matters (thousands of evals): the low-level API is used so each eval costs
create, put_archive (skipped for an empty submission), start, wait, inspect, get_archive,
(logs, only with a log_path), remove and nothing else.

Decisions:
* The entrypoint is a tiny `/bin/sh -c` setup step, then `exec /bin/sh -c "[judge] cmd"`. The
  setup removes whatever sits at /opt/sforge/result.json (file, directory, symlink, or
  /opt/sforge itself as a link or file) after extraction, so neither the image nor the archive
  can plant a result. If it cannot, it exits SETUP_FAILED_EXIT and the result is invalid.
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
* Containers carry labels sforge.judge=1, owner pid, host, process start time and a deadline
  (epoch seconds), so `sweep_stale_containers` removes those whose owner died on this host
  or whose deadline passed, from any sforge process, at its start.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import tarfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig

from . import __version__, owner
from .archive import ArchiveError, ArchiveLimits, FilteredArchive, filter_submission
from .errors import InfrastructureError
from .hashing import file_sha256
from .model import Task
from .results import EvalResult, eval_key
from .units import parse_memory

log = logging.getLogger(__name__)

RESULT_DIR = "/opt/sforge"
RESULT_PATH = f"{RESULT_DIR}/result.json"
JUDGE_LABEL = "sforge.judge"
OWNER_PID_LABEL = "sforge.owner.pid"
OWNER_HOST_LABEL = "sforge.owner.host"
OWNER_START_LABEL = "sforge.owner.start"  # process start time: a reused pid is not its owner
DEADLINE_LABEL = "sforge.deadline"  # epoch seconds after which nobody waits for it any more
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
    """Per-container bounds from config.yaml (judge_limits)."""

    pids: int = 4096  # processes + threads: a parallel build or a JVM test run fits
    writable: str | None = "10g"  # writable layer, where the storage driver can bound it


def lockdown(limits: ContainerLimits) -> dict[str, Any]:
    """Host-config options of every container from a judge image (judges, game servers)."""
    return {"security_opt": ["no-new-privileges"], "cap_drop": ["ALL"],
            "cap_add": list(JUDGE_CAPS), "pids_limit": limits.pids}
# The setup step exits with this code if it cannot clear a planted result.json (then whatever
# is at RESULT_PATH was not written by the grader). A grader that itself exits 222 is judged
# invalid too: an accepted ambiguity, documented.
SETUP_FAILED_EXIT = 222

# Runs before [judge] cmd ("$1"), after the submission is in place: nothing the image or the
# submission planted at /opt/sforge (a result.json file, directory or symlink, or /opt/sforge
# itself as a symlink or file) survives, so only what runs after this can write the result.
_SETUP = (
    f'd={RESULT_DIR}; '
    '{ { [ -d "$d" ] && [ ! -L "$d" ]; } || rm -rf "$d"; } '
    '&& rm -rf "$d/result.json" && mkdir -p "$d" && [ ! -e "$d/result.json" ] '
    f'|| {{ echo "sforge: cannot clear $d/result.json" >&2; exit {SETUP_FAILED_EXIT}; }}; '
    'exec /bin/sh -c "$1"'
)
# Docker's messages when an extracted member collides with the image's filesystem (a file
# where the submission has a directory, …): a verdict about the submission, not Docker trouble.
_EXTRACT_CONFLICTS = ("not a directory", "is a directory", "file exists", "cannot overwrite",
                      "directory not empty", "file name too long")
# Daemons (by address) found unable to bound a container's writable layer.
_storage_opt_supported: dict[str, bool] = {}
_GO_DIR = 1 << 31
_GO_SYMLINK = 1 << 27
_DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _fmt_num(value: float) -> str:
    """4.0 → '4', 0.5 → '0.5': how a person wrote it in task.toml."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _owner_labels(kind: str = JUDGE_LABEL, deadline: float | None = None) -> dict[str, str]:
    """Who owns a container (kind: JUDGE_LABEL, or a run's label), and when nobody waits for
    it any more (judges: wall clock + grace)."""
    me = owner.identity()
    labels = {kind: "1", OWNER_PID_LABEL: me["pid"], OWNER_HOST_LABEL: me["host"]}
    if deadline is not None:
        labels[DEADLINE_LABEL] = str(int(deadline))
    if "start" in me:
        labels[OWNER_START_LABEL] = me["start"]
    return labels


def _daemon(client: docker.DockerClient) -> str:
    adapter = getattr(client.api, "_custom_adapter", None)
    socket_path = getattr(adapter, "socket_path", None)
    return f"unix://{socket_path}" if socket_path else str(client.api.base_url)


class _LogWriter:
    """The judge's stdout+stderr to `path`: the first LOG_HEAD_BYTES straight to a temporary
    file, the last LOG_TAIL_BYTES in memory, a "… N bytes cut …" line between; the file
    appears (atomically) only at `finish`."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        self.fh = self.tmp.open("wb")
        self.head = 0
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.cut = 0

    def feed(self, chunk: bytes) -> None:
        room = LOG_HEAD_BYTES - self.head
        if room > 0:
            self.fh.write(chunk[:room])
            self.head += min(room, len(chunk))
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= LOG_TAIL_BYTES:
            self.cut += len(self.tail[0])
            self.tail_size -= len(self.tail.popleft())

    def finish(self, trailer: str) -> None:
        try:
            tail = b"".join(self.tail)
            extra = len(tail) - LOG_TAIL_BYTES
            if extra > 0:
                self.cut += extra
                tail = tail[extra:]
            if self.cut:
                self.fh.write(f"\n[sforge] … {self.cut} bytes cut …\n".encode())
            self.fh.write(tail)
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
    # itself (the service's game servers) sets False: its log is read from the daemon.
    LIVE_LOG = True

    def __init__(self, client: docker.DockerClient, image: str, task: Task,
                 timeout: float, log_path: Path | None, limits: ContainerLimits | None = None,
                 key: str = ""):
        self.key = key
        self.api = client.api
        self.daemon = _daemon(client)
        self.image = image
        self.task = task
        self.timeout = timeout
        self.log_path = log_path
        self.limits = limits or ContainerLimits()
        self.id: str | None = None
        self.log: _LogWriter | None = None
        self.reader: threading.Thread | None = None
        self.read_error: BaseException | None = None

    def _infra(self, what: str, exc: Exception) -> InfrastructureError:
        if isinstance(exc, requests.exceptions.ConnectionError):
            return InfrastructureError(f"cannot reach the Docker daemon at {self.daemon} "
                                       f"({what} for judge image {self.image}): {exc}")
        return InfrastructureError(f"Docker daemon at {self.daemon}: {what} failed for judge "
                                   f"image {self.image}: {exc}")

    def create(self) -> None:
        judge, env = self.task.judge, self.task.environment
        deadline = time.time() + self.timeout + DEADLINE_GRACE_S
        writable = self.limits.writable if _storage_opt_supported.get(self.daemon, True) \
            else None
        while True:
            try:
                resp = self.api.create_container(
                    self.image,
                    entrypoint=["/bin/sh", "-c", _SETUP, "sforge-judge", judge.cmd],
                    working_dir=env.cwd,
                    environment={"SFORGE_CPUS": _fmt_num(judge.cpus),
                                 "SFORGE_MEMORY": judge.memory},
                    labels={**_owner_labels(deadline=deadline), TASK_LABEL: self.task.id,
                            KEY_LABEL: self.key},
                    host_config=self._host_config(writable),
                    detach=True,
                )
                break
            except docker.errors.ImageNotFound:
                raise InfrastructureError(f"judge image {self.image} not found on the Docker "
                                          f"daemon at {self.daemon}; build it first") from None
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc).lower().replace(" ", "-")
                if writable and ("storage-opt" in text or "storageopt" in text):
                    _storage_opt_supported[self.daemon] = False  # said once per daemon
                    log.info("the Docker daemon at %s cannot bound a container's writable "
                             "layer (%s); judges run without that bound", self.daemon,
                             exc.explanation)
                    writable = None
                    continue
                raise self._infra("creating the judge container", exc) from None
            except _DOCKER_ERRORS as exc:
                raise self._infra("creating the judge container", exc) from None
        self.id = resp["Id"]

    def _host_config(self, writable: str | None) -> dict[str, Any]:
        judge = self.task.judge
        memory = parse_memory(judge.memory)
        return self.api.create_host_config(
            init=True,
            network_mode="bridge" if judge.internet else "none",
            nano_cpus=int(judge.cpus * 1e9),
            mem_limit=memory,
            memswap_limit=memory,  # equal: no swap on top of the limit
            # Output is read live by attaching (see run): the daemon keeps none of it.
            log_config=LogConfig(type="none"),
            storage_opt={"size": writable} if writable else None,
            **lockdown(self.limits),
        )

    def extract(self, filtered: FilteredArchive) -> str | None:
        """Put the filtered submission into cwd; a collision with the image is a verdict."""
        if not filtered.members:
            return None
        data: Any = filtered.read_bytes() if filtered.size <= (64 << 20) else filtered.data
        cwd = self.task.environment.cwd
        try:
            try:
                self.api.put_archive(self.id, cwd, data)
            except docker.errors.NotFound:
                # cwd missing (Docker normally creates WorkingDir at create time): make it.
                self.api.put_archive(self.id, "/", _dirs_tar(cwd))
                filtered.data.seek(0)
                self.api.put_archive(self.id, cwd, data)
        except docker.errors.APIError as exc:
            message = str(exc.explanation or exc)
            if any(s in message.lower() for s in _EXTRACT_CONFLICTS):
                return f"could not extract the submission into {cwd}: {message}"
            raise self._infra("extracting the submission", exc) from None
        except _DOCKER_ERRORS as exc:
            raise self._infra("extracting the submission", exc) from None
        return None

    def attach(self) -> None:
        """Read the judge's output from before its first byte, in a thread, into the log."""
        if self.log_path is None:
            return
        try:
            stream = self.api.attach(self.id, stdout=True, stderr=True, stream=True, logs=False)
        except _DOCKER_ERRORS as exc:
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
        started_at = _now()
        t0 = time.monotonic()
        timed_out = False
        try:
            self.attach()
            self.api.start(self.id)
            running = time.monotonic()  # the clock runs from here: start-up is Docker's time
            try:
                self.api.wait(self.id, timeout=self.timeout)
            except requests.exceptions.RequestException:
                if time.monotonic() - running < self.timeout - 0.05:
                    raise  # the daemon went away, not the clock
                timed_out = True
                with contextlib.suppress(docker.errors.APIError):  # 409: it just exited
                    self.api.kill(self.id)
        except _DOCKER_ERRORS as exc:
            raise self._infra("running the judge", exc) from None
        return timed_out, time.monotonic() - t0, started_at, _now()

    def inspect_state(self) -> dict[str, Any]:
        try:
            return self.api.inspect_container(self.id)["State"]
        except _DOCKER_ERRORS as exc:
            raise self._infra("inspecting the judge container", exc) from None

    def read_result(self) -> tuple[str | None, dict[str, Any], bool]:
        """→ (problem, fields, present). Reads RESULT_PATH from the exited container."""
        try:
            stream, stat = self.api.get_archive(self.id, RESULT_PATH)
        except docker.errors.NotFound:
            return None, {}, False
        except _DOCKER_ERRORS as exc:
            raise self._infra("reading result.json", exc) from None
        mode = int(stat.get("mode", 0))
        if mode & _GO_DIR:
            return "result.json is a directory, not a file", {}, True
        if mode & _GO_SYMLINK:
            return "result.json is a symlink, not a file", {}, True
        if int(stat.get("size", 0)) > MAX_RESULT_BYTES:
            return f"result.json is larger than {MAX_RESULT_BYTES} bytes", {}, True
        buf = bytearray()
        try:
            for chunk in stream:
                buf += chunk
                if len(buf) > MAX_RESULT_BYTES + (1 << 20):
                    return f"result.json is larger than {MAX_RESULT_BYTES} bytes", {}, True
        except _DOCKER_ERRORS as exc:
            raise self._infra("reading result.json", exc) from None
        with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tar:
            member = tar.next()
            fh = tar.extractfile(member) if member is not None and member.isreg() else None
            if fh is None:
                return "result.json is not a regular file", {}, True
            raw = fh.read()
        problem, fields = parse_result(raw)
        return problem, fields, True

    def write_log(self, trailer: str) -> None:
        if self.log_path is None:
            return
        if self.log is None and not self.LIVE_LOG and self.id is not None:
            try:
                chunks = self.api.logs(self.id, stdout=True, stderr=True, stream=True,
                                       follow=False)
                _write_log(self.log_path, chunks, trailer)
            except _DOCKER_ERRORS as exc:
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
        if self.read_error is not None and not isinstance(self.read_error, _DOCKER_ERRORS):
            raise self.read_error
        writer, self.log = self.log, None
        writer.finish(trailer)

    def remove(self) -> None:
        if self.log is not None:
            self.log.discard()
        if self.id is None:
            return
        try:
            self.api.remove_container(self.id, force=True)
        except docker.errors.NotFound:
            pass
        except _DOCKER_ERRORS as exc:  # never mask the real outcome; sweep_stale_containers
            log.warning("could not remove judge container %s: %s", self.id[:12], exc)


def _dirs_tar(path: str) -> bytes:
    """A tar of the directories of an absolute path, to extract at '/'."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            info = tarfile.TarInfo("/".join(parts[:i]))
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
    return buf.getvalue()


def run_judge(client: docker.DockerClient, image: str, task: Task, archive: Path, *,
              limits: ArchiveLimits | None = None, timeout: float | None = None,
              log_path: Path | None = None, key: str | None = None,
              submission: str | None = None,
              container_limits: ContainerLimits | None = None) -> EvalResult:
    """Grade `archive` with the judge `image` of `task`; return the verdict as an EvalResult.

    `submission` is the archive's sha256 and `key` the eval key; both are computed when not
    given (the caller usually has them: `eval_key(judge_tag, sha, task.judge_settings())`).
    `timeout` overrides `[judge] timeout_sec`. `log_path` receives the judge's stdout and
    stderr, followed by a few "[sforge]" lines.

    Raises InfrastructureError (Docker trouble, an archive that cannot be opened); every
    other outcome, including archives that are not tar archives, refused archives, timeouts
    and OOM kills, is a result.
    """
    archive = Path(archive)
    submission = submission or _archive_sha256(archive)
    settings = task.judge_settings()
    wall = float(timeout if timeout is not None else task.judge.timeout_sec)
    key = key or eval_key(image, submission, settings)

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
            return EvalResult(task=task.id, submission=submission,
                              key=key or eval_key(image, submission, settings),
                              judge_image=image, judge_settings=settings,
                              sforge_version=__version__, changed=filtered.changed,
                              warnings=filtered.warnings,
                              log=str(log_path) if log_path else None, **fields)

        def refused(reason: str, rejected: list) -> EvalResult:
            now = _now()
            if log_path is not None:
                _write_log(log_path, (), f"[sforge] archive refused: {reason}\n")
            return result(valid=False, reason=reason, rejected=rejected, started_at=now,
                          finished_at=now)

        if filtered.refused:
            return refused(filtered.refused, filtered.rejected)
        run = _JudgeRun(client, image, task, wall, log_path,
                        container_limits or ContainerLimits(), key)
        return _grade(run, filtered, result)


def _grade(run: _JudgeRun, filtered: FilteredArchive,
           result: Callable[..., EvalResult]) -> EvalResult:
    try:
        run.create()
        conflict = run.extract(filtered)
        if conflict:
            now = _now()
            run.write_log(f"[sforge] {conflict}\n")
            return result(valid=False, reason=conflict, rejected=filtered.rejected,
                          started_at=now, finished_at=now)
        timed_out, duration, started_at, finished_at = run.run()
        common = {"rejected": filtered.rejected, "duration_s": round(duration, 3),
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
    finally:
        run.remove()


def sweep_stale_containers(client: docker.DockerClient, kind: str = JUDGE_LABEL) -> list[str]:
    """Remove containers nobody waits for (judges, or work containers of runs with
    kind=RUN_LABEL); → removed ids.

    Stale: its owner died on this host (pid gone, or reused by another process), or its
    deadline label passed (on any host: the owner overran or hangs). A live owner's judge
    within its deadline, and another host's judge within its deadline, are never touched.
    """
    removed = []
    try:
        containers = client.api.containers(all=True, filters={"label": kind})
    except _DOCKER_ERRORS as exc:
        raise InfrastructureError(f"cannot list judge containers on the Docker daemon at "
                                  f"{_daemon(client)}: {exc}") from None
    for c in containers:
        labels = c.get("Labels") or {}
        try:
            deadline: float | None = float(labels[DEADLINE_LABEL])
        except (KeyError, ValueError):
            deadline = None
        if owner.gone(labels.get(OWNER_HOST_LABEL), labels.get(OWNER_PID_LABEL),
                      labels.get(OWNER_START_LABEL), deadline) is None:
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
        except docker.errors.NotFound:
            continue  # another sweeper was first
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "removal … already in progress": another sweeper
                continue
            raise InfrastructureError(f"cannot remove stale judge container {c['Id'][:12]}: "
                                      f"{exc}") from None
        except _DOCKER_ERRORS as exc:
            raise InfrastructureError(f"cannot remove stale judge container {c['Id'][:12]}: "
                                      f"{exc}") from None
        removed.append(c["Id"])
    return removed


def docker_run_args(task: Task, limits: ContainerLimits | None = None) -> list[str]:
    """`docker run` flags giving a container what a judge container of `task` gets (limits,
    lockdown, network, cwd, environment): the floor the grading figures are measured
    against. (The writable-layer bound is left out: most daemons cannot apply it.)"""
    judge = task.judge
    memory = str(parse_memory(judge.memory))
    locked = lockdown(limits or ContainerLimits())
    return ["--init", "--cpus", _fmt_num(judge.cpus), "--memory", memory,
            "--memory-swap", memory, "--network", "bridge" if judge.internet else "none",
            "--log-driver", "none", "--security-opt", *locked["security_opt"],
            "--cap-drop", "ALL", *[f"--cap-add={c}" for c in locked["cap_add"]],
            "--pids-limit", str(locked["pids_limit"]),
            "-w", task.environment.cwd, "-e", f"SFORGE_CPUS={_fmt_num(judge.cpus)}",
            "-e", f"SFORGE_MEMORY={judge.memory}"]
