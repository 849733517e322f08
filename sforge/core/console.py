"""What sforge says on the terminal while it works: warnings (each once), one live progress
display for grading and reports, and one line per finished judge with -v.

The progress display listens to Snakemake's own job events (a logging handler on its
logger: job info, finished, error, progress) instead of Snakemake's text, so it can name the
task, the source and the verdict of each judge, and it hides Snakemake's chatter
("Finished jobid: 4 (Rule: evaluate)") unless -vv asks for it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def no_color() -> bool:
    """NO_COLOR is set (https://no-color.org): no ANSI escapes in anything sforge writes, so
    no colour and no live display redrawn in place (plain lines instead)."""
    return bool(os.environ.get("NO_COLOR"))


_warned: set[str] = set()
_warn_lock = threading.Lock()


def say(message: str) -> None:
    """`sforge: message` on stderr, at once: a progress note, or a note for a job's log (a
    cluster job's SLURM log). stdout carries only what a command prints as its answer."""
    print(f"sforge: {message}", file=sys.stderr, flush=True)


def warn(message: str, key: str | None = None) -> None:
    """`sforge: warning: message` on stderr, once per process for the same key (default:
    the message), however many images, jobs or threads run into it."""
    with _warn_lock:
        if (key or message) in _warned:
            return
        _warned.add(key or message)
    say(f"warning: {message}")


# Snakemake's events (snakemake_interface_logger_plugins.common.LogEvent values)
JOB_INFO, JOB_FINISHED, JOB_ERROR, PROGRESS = "job_info", "job_finished", "job_error", "progress"
ERROR = "error"
JOB_EXCEPTION = "RuleException"  # how Snakemake reports a job that raised
# Snakemake's closing notes on a failed job, which a JobProgress that explains it replaces
FAILED_JOB_NOTES = ("Exiting because a job execution failed", "--keep-incomplete mode is set")
# What the live display replaces in Snakemake's own output (errors and warnings stay).
CHATTER = {"job_info", "job_finished", "progress", "shellcmd", "job_started", "run_info",
           "resources_info", "workflow_started"}


@dataclass(frozen=True)
class Verdict:
    """What -v prints of one finished judge, and whether its result is invalid."""
    line: str  # task, source(s), score or INVALID + reason
    invalid: bool


class JobProgress(logging.Handler):
    """A logging handler for Snakemake's logger: counts jobs, judges, invalid results and
    failures, draws them as one rich progress line (done/total, rate, ETA), and with
    `verbose` prints one line per finished job as `describe(rule, wildcards)` tells it (None:
    nothing to say)."""

    def __init__(self, title: str, describe: Callable[[str, dict[str, str]], Verdict | None],
                 *, verbose: bool = False, stream: Any = None, explains_failures: bool = False):
        super().__init__(level=logging.DEBUG)
        self.title = title
        self.describe = describe
        self.verbose = verbose
        # True: a failed job is told only by this handler's one line (describe() is given
        # the reason as wildcards["reason"]); Snakemake's report of it (the exception with
        # its frames, "Exiting because a job execution failed") is hidden (HideChatter)
        self.explains_failures = explains_failures
        self._last_error = ""  # the last failed job's exception as Snakemake formatted it
        self.stream = stream or sys.stderr
        self.jobs: dict[int, tuple[str, dict[str, str]]] = {}
        self.done = self.total = 0
        self.judged = self.invalid = self.failed_count = 0
        self.failures: list[str] = []
        self.started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None
        self.live = False  # drawn in place on a terminal (not with NO_COLOR)

    # the display --------------------------------------------------------------------
    def __enter__(self) -> JobProgress:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(file=self.stream, highlight=False, no_color=no_color())
        self.live = console.is_terminal and not no_color()
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TextColumn("ETA"), TimeRemainingColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[counts]}"),
            console=console, transient=False, refresh_per_second=4,
            disable=not self.live)
        self._progress.start()
        self._task = self._progress.add_task(self.title, total=None, rate="", counts="")
        return self

    def __exit__(self, *exc: object) -> None:
        self._refresh()
        if self._progress is not None:
            self._progress.stop()

    def print(self, line: str) -> None:
        """A line above the live display (or plainly, when there is none)."""
        if self._progress is not None and self.live:
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def _refresh(self) -> None:
        if self._progress is None:
            return
        elapsed = max(time.monotonic() - self.started, 1e-9)
        counts = [f"{self.judged} judged"] if self.judged else []
        if self.invalid:
            counts.append(f"{self.invalid} invalid")
        if self.failed_count:
            counts.append(f"{self.failed_count} FAILED")
        self._progress.update(self._task, completed=self.done, total=self.total or None,
                              rate=f"{self.done / elapsed:.2f}/s",
                              counts=", ".join(counts))

    # Snakemake's events --------------------------------------------------------------
    def emit(self, record: logging.LogRecord) -> None:
        """Handle one Snakemake event; a display problem never fails a run."""
        try:
            self._handle(record)
        except Exception:  # a display problem must never fail a run
            self.handleError(record)

    def _handle(self, record: logging.LogRecord) -> None:
        event = str(getattr(record, "event", "") or "")
        if event == JOB_INFO:
            self.jobs[record.jobid] = (record.rule_name,  # type: ignore[attr-defined]
                                       dict(getattr(record, "wildcards", None) or {}))
        elif event == JOB_FINISHED:
            rule, wildcards = self.jobs.pop(record.job_id, ("", {}))  # type: ignore[attr-defined]
            self.finished(rule, wildcards)
        elif event == ERROR and getattr(record, "exception", None) == JOB_EXCEPTION:
            self._last_error = str(record.getMessage())  # its job's JOB_ERROR comes next
        elif event == JOB_ERROR:
            rule = getattr(record, "rule_name", "?")
            self.failed(rule, dict(self.jobs.pop(getattr(record, "jobid", -1), (rule, {}))[1]),
                        exception_reason(self._last_error))
            self._last_error = ""
        elif event == PROGRESS:
            self.progress(int(record.done), int(record.total))  # type: ignore[attr-defined]

    # what happened (from Snakemake's events, or called directly by a local batch) ------
    def progress(self, done: int, total: int) -> None:
        """Jobs done of total."""
        self.done, self.total = done, total
        self._refresh()

    def finished(self, rule: str, wildcards: dict[str, str]) -> None:
        """One job finished: counted, and with -v its verdict printed."""
        self.judged += rule == "evaluate"
        verdict = self.describe(rule, wildcards)
        if verdict is not None:
            self.invalid += verdict.invalid
            if self.verbose:
                self.print(verdict.line)
        self._refresh()

    def failed(self, rule: str, wildcards: dict[str, str], reason: str = "") -> None:
        """One job failed: counted, its line printed and kept for the summary. `reason`:
        its exception's message, as far as Snakemake's report of it says."""
        self.failed_count += 1
        verdict = self.describe(rule, {**wildcards, "failed": "yes", "reason": reason})
        line = verdict.line if verdict is not None else \
            f"FAILED {rule} " + " ".join(f"{k}={v}" for k, v in wildcards.items()) + \
            (f": {reason}" if reason and self.explains_failures else "")
        self.failures.append(line)
        self.print(line)
        self._refresh()


class HideChatter(logging.Filter):
    """On Snakemake's own handlers while JobProgress draws: its informational lines
    ("Building DAG of jobs...", "Finished jobid: 4 (Rule: evaluate)", "3 of 9 steps done")
    go; warnings and errors stay. With `job_errors` (a JobProgress that explains failures)
    Snakemake's report of a failed job goes too: the exception with its frames, "Error in
    rule", "Exiting because a job execution failed", the --keep-incomplete note."""

    def __init__(self, job_errors: bool = False):
        super().__init__()
        self.job_errors = job_errors

    def filter(self, record: logging.LogRecord) -> bool:
        """Only warnings and errors pass, and none of the events JobProgress shows."""
        event = str(getattr(record, "event", "") or "")
        if record.levelno < logging.WARNING or event in CHATTER:
            return False
        if self.job_errors:
            if event == JOB_ERROR or (event == ERROR and getattr(
                    record, "exception", None) == JOB_EXCEPTION):
                return False
            return not str(record.msg).startswith(FAILED_JOB_NOTES)
        return True


def exception_reason(text: str) -> str:
    """The message of a job's exception as Snakemake formats it ("RuleException:", "<Type>
    in file <f>, line <n>:", the message, then its frames): the message alone, on one
    line; "" when there is none."""
    lines = text.splitlines()
    start = next((i + 1 for i, line in enumerate(lines)
                  if " in file " in line and line.rstrip().endswith(":")), 0)
    kept = []
    for line in lines[start:]:
        if line.startswith("  File "):
            break
        if line.strip() and line.strip() != f"{JOB_EXCEPTION}:":
            kept.append(line.strip())
    return " ".join(kept)
