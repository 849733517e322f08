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
  so that shell can copy result.json into the private out directory after it; the exit code
  is passed on unchanged. The setup's own commands come from the system's folders, never a
  folder the submission writes (judge_container.setup_script).
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

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sforge import __version__
from sforge.benchmark.hashing import file_sha256
from sforge.benchmark.model import Task
from sforge.containers import owner
from sforge.containers.engine import ContainerEngine
from sforge.core.clock import now_iso
from sforge.core.errors import InfrastructureError
from sforge.core.units import parse_memory
from sforge.grading.archive import ArchiveError, FilteredArchive, filter_submission
from sforge.grading.archive_limits import ArchiveLimits
from sforge.grading.contract import limits_in_key
from sforge.grading.judge_container import (
    RESULT_PATH,
    SETUP_FAILED_EXIT,
    ContainerLimits,
    JudgeRun,
    lockdown,
    plain_number,
)
from sforge.grading.judge_log import write_log
from sforge.grading.results import GRADING_CONTRACT, EvalResult, eval_key


def _archive_sha256(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError as exc:
        raise InfrastructureError(f"cannot read submission archive {path}: {exc}") from None


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

    def __init__(self, run: JudgeRun | None, result: Callable[..., EvalResult],
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
        """Remove the prepared container if it never ran; safe to call after `run`."""
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
    # provenance: the tag as resolved now (a refused archive makes no Docker call at all)
    image_id = "" if filtered.refused else engine.image_id(image) or ""
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
                              judge_image_id=image_id, grading_contract=GRADING_CONTRACT,
                              host=owner.node_name(),
                              warnings=filtered.warnings,
                              log=str(log_path) if log_path else None, **fields)

        if filtered.refused:
            now = now_iso("milliseconds")
            if log_path is not None:
                write_log(log_path, (), f"[sforge] archive refused: {filtered.refused}\n")
            return PreparedJudge(None, result, filtered.rejected, result(
                valid=False, reason=filtered.refused, rejected=filtered.rejected,
                started_at=now, finished_at=now))
        run = JudgeRun(engine, image, task, wall, log_path,
                        container_limits or ContainerLimits(), key, copy_out)
        try:
            run.create()
            conflict = run.extract(filtered)
        except BaseException:
            run.remove()
            raise
        if conflict:
            try:
                now = now_iso("milliseconds")
                run.write_log(f"[sforge] {conflict}\n")
            finally:
                run.remove()
            return PreparedJudge(None, result, filtered.rejected, result(
                valid=False, reason=conflict, rejected=filtered.rejected, started_at=now,
                finished_at=now))
        return PreparedJudge(run, result, filtered.rejected)


def _finish(run: JudgeRun, rejected: list, result: Callable[..., EvalResult],
            on_exit: Callable[[], None] | None = None) -> EvalResult:
    """Start the prepared container, wait, and turn what it leaves into the verdict."""
    timed_out, duration, started_at, finished_at = run.run()
    if on_exit is not None:
        on_exit()
    common = {"rejected": rejected, "duration_s": round(duration, 3),
              "started_at": started_at, "finished_at": finished_at}
    if timed_out:
        reason = f"timed out after {plain_number(run.timeout)} s"
        run.write_log(f"\n[sforge] {reason}: killed\n")
        return result(valid=False, reason=reason, timed_out=True, **common)
    state = run.inspect_state()
    exit_code = state.get("ExitCode")
    oom = bool(state.get("OOMKilled"))
    problem, fields, present = run.read_result()
    memory = run.task.judge.memory
    if exit_code == SETUP_FAILED_EXIT:
        problem, fields = (f"judge setup failed: could not clear {RESULT_PATH}, or no rm, "
                           "mkdir or head in the image's system folders (the log says "
                           "which)"), {}
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
    return ["--init", "--cpus", plain_number(judge.cpus), "--memory", memory,
            "--memory-swap", memory, "--network", "bridge" if judge.internet else "none",
            "--log-driver", "none", "--security-opt", "no-new-privileges",
            "--cap-drop", "ALL", *[f"--cap-add={c}" for c in locked["cap_add"]],
            "--pids-limit", str(locked["pids"]),
            "-w", task.environment.cwd, "-e", f"SFORGE_CPUS={plain_number(judge.cpus)}",
            "-e", f"SFORGE_MEMORY={judge.memory}"]
