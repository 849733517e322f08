"""Run one judge container on one submission archive and turn what it leaves into an EvalResult.

The judge run of the spec ("Judge Contract"): a fresh container from the judge image, the
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
* OOM-killed with no result.json: "killed: out of memory (limit …)". A result written despite
  an OOM kill of some child is kept, with oom_killed set.
* result.json over MAX_RESULT_BYTES, or not a regular file, is invalid; logs are capped at
  MAX_LOG_BYTES and end with "[sforge] …" lines saying how the run ended.
* Containers carry labels sforge.judge=1, owner pid, host and process start time, so
  `sweep_stale_containers` removes only those of dead owners on this host.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import socket
import tarfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig

from . import __version__
from .archive import ArchiveError, ArchiveLimits, FilteredArchive, filter_submission
from .errors import InfrastructureError
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
TASK_LABEL = "sforge.task"
MAX_RESULT_BYTES = 16 << 20
MAX_LOG_BYTES = 64 << 20
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
                      "directory not empty")
_GO_DIR = 1 << 31
_GO_SYMLINK = 1 << 27
_DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _fmt_num(value: float) -> str:
    """4.0 → '4', 0.5 → '0.5': how a person wrote it in task.toml."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _process_start(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _owner_labels(kind: str = JUDGE_LABEL) -> dict[str, str]:
    labels = {kind: "1", OWNER_PID_LABEL: str(os.getpid()),
              OWNER_HOST_LABEL: socket.gethostname()}
    start = _process_start(os.getpid())
    if start:
        labels[OWNER_START_LABEL] = start
    return labels


def _daemon(client: docker.DockerClient) -> str:
    adapter = getattr(client.api, "_custom_adapter", None)
    socket_path = getattr(adapter, "socket_path", None)
    return f"unix://{socket_path}" if socket_path else str(client.api.base_url)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise ArchiveError(f"cannot read submission archive {path}: {exc}") from None
    return digest.hexdigest()


def _write_log(path: Path, chunks: Iterator[bytes], trailer: str) -> None:
    """Stream the judge's stdout+stderr to `path` (capped), then sforge's own trailer lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            written = 0
            for chunk in chunks:
                if written + len(chunk) > MAX_LOG_BYTES:
                    fh.write(chunk[: MAX_LOG_BYTES - written])
                    fh.write(f"\n[sforge] log truncated at {MAX_LOG_BYTES} bytes\n".encode())
                    break
                fh.write(chunk)
                written += len(chunk)
            fh.write(trailer.encode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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
    score = data.get("score")
    number = isinstance(score, int | float) and not isinstance(score, bool)
    if number:
        try:
            score = float(score)
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

    def __init__(self, client: docker.DockerClient, image: str, task: Task,
                 timeout: float, log_path: Path | None):
        self.api = client.api
        self.daemon = _daemon(client)
        self.image = image
        self.task = task
        self.timeout = timeout
        self.log_path = log_path
        self.id: str | None = None

    def _infra(self, what: str, exc: Exception) -> InfrastructureError:
        if isinstance(exc, requests.exceptions.ConnectionError):
            return InfrastructureError(f"cannot reach the Docker daemon at {self.daemon} "
                                       f"({what} for judge image {self.image}): {exc}")
        return InfrastructureError(f"Docker daemon at {self.daemon}: {what} failed for judge "
                                   f"image {self.image}: {exc}")

    def create(self) -> None:
        judge, env = self.task.judge, self.task.environment
        memory = parse_memory(judge.memory)
        host_config = self.api.create_host_config(
            init=True,
            network_mode="bridge" if judge.internet else "none",
            nano_cpus=int(judge.cpus * 1e9),
            mem_limit=memory,
            memswap_limit=memory,  # equal: no swap on top of the limit
            log_config=LogConfig(type="json-file", config={"max-size": "64m"}),
        )
        try:
            resp = self.api.create_container(
                self.image,
                entrypoint=["/bin/sh", "-c", _SETUP, "sforge-judge", judge.cmd],
                working_dir=env.cwd,
                environment={"SFORGE_CPUS": _fmt_num(judge.cpus), "SFORGE_MEMORY": judge.memory},
                labels={**_owner_labels(), TASK_LABEL: self.task.id},
                host_config=host_config,
                detach=True,
            )
        except docker.errors.ImageNotFound:
            raise InfrastructureError(f"judge image {self.image} not found on the Docker daemon "
                                      f"at {self.daemon}; build it first") from None
        except _DOCKER_ERRORS as exc:
            raise self._infra("creating the judge container", exc) from None
        self.id = resp["Id"]

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

    def run(self) -> tuple[bool, float, str, str]:
        """Start and wait up to the wall clock; kill at once on expiry. → timed_out, …"""
        started_at = _now()
        t0 = time.monotonic()
        timed_out = False
        try:
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
        try:
            chunks = self.api.logs(self.id, stdout=True, stderr=True, stream=True, follow=False)
            _write_log(self.log_path, chunks, trailer)
        except _DOCKER_ERRORS as exc:
            raise self._infra("reading the judge's logs", exc) from None

    def remove(self) -> None:
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
              submission: str | None = None) -> EvalResult:
    """Grade `archive` with the judge `image` of `task`; return the verdict as an EvalResult.

    `submission` is the archive's sha256 and `key` the eval key; both are computed when not
    given (the caller usually has them: `eval_key(judge_tag, sha, task.judge_settings())`).
    `timeout` overrides `[judge] timeout_sec`. `log_path` receives the judge's stdout and
    stderr, followed by a few "[sforge]" lines.

    Raises ArchiveError (not a tar archive) and InfrastructureError (Docker trouble); every
    other outcome, including refused archives, timeouts and OOM kills, is a result.
    """
    archive = Path(archive)
    submission = submission or _sha256(archive)
    settings = task.judge_settings()
    wall = float(timeout if timeout is not None else task.judge.timeout_sec)

    with filter_submission(archive, task.submission, limits, task.environment.cwd) as filtered:
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

        if filtered.refused:
            now = _now()
            if log_path is not None:
                _write_log(log_path, iter(()), f"[sforge] archive refused: {filtered.refused}\n")
            return result(valid=False, reason=filtered.refused, rejected=filtered.rejected,
                          started_at=now, finished_at=now)
        return _grade(_JudgeRun(client, image, task, wall, log_path), filtered, result)


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


def _alive(pid: int, start: str | None) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    current = _process_start(pid)
    return start is None or current is None or current == start


def sweep_stale_containers(client: docker.DockerClient, kind: str = JUDGE_LABEL) -> list[str]:
    """Remove containers (judges, or work containers with kind=RUN_LABEL of runs) left by dead
    sforge processes on this host; → removed ids.

    A container belongs to a live run when its owner pid exists here with the same start time;
    those (and other hosts' containers) are never touched.
    """
    host = socket.gethostname()
    removed = []
    try:
        containers = client.api.containers(all=True, filters={"label": kind})
    except _DOCKER_ERRORS as exc:
        raise InfrastructureError(f"cannot list judge containers on the Docker daemon at "
                                  f"{_daemon(client)}: {exc}") from None
    for c in containers:
        labels = c.get("Labels") or {}
        if labels.get(OWNER_HOST_LABEL) != host:
            continue
        try:
            pid = int(labels.get(OWNER_PID_LABEL, ""))
        except ValueError:
            continue
        if _alive(pid, labels.get(OWNER_START_LABEL)):
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
        except docker.errors.NotFound:
            pass
        except _DOCKER_ERRORS as exc:
            raise InfrastructureError(f"cannot remove stale judge container {c['Id'][:12]}: "
                                      f"{exc}") from None
        removed.append(c["Id"])
    return removed
