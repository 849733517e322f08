"""sforge's exit codes, the one place that maps an error to its code and kind, and the
table `sforge --help` and the README show: a script tells a bad verdict from a typo, a bad
task file from a Docker daemon that is down, without reading the message."""

from __future__ import annotations

from sforge.core.errors import InfrastructureError, SforgeError, UsageError

OK = 0              # done, and every verdict, run, check and build is good
FAILED = 1          # done, but a verdict is INVALID, a run or build failed, a check found errors
USAGE = 2           # the command line: unknown option, bad value (-j 0), missing --script
INPUT = 3           # what it names: benchmark, task, archive, config file, agent, run id
INFRASTRUCTURE = 4  # Docker daemon, registry, judge service, disk: retry later
INTERRUPTED = 130   # Ctrl-C
CLOSED_PIPE = 141   # the reader of stdout left (`sforge list | head -1`), as SIGPIPE

# (code, kind, meaning): the table of `sforge --help` and of the README's "Exit codes".
EXIT_CODES = (
    (OK, "ok", "done; every verdict valid, every run, build and check good"),
    (FAILED, "failed", "done, but a verdict is INVALID, a run/build/grade failed, a task "
                       "is broken"),
    (USAGE, "usage", "the command line: unknown option, bad value (-j 0), missing --script"),
    (INPUT, "input", "what it names: benchmark, task, archive, config file, agent, run"),
    (INFRASTRUCTURE, "infrastructure", "Docker daemon, registry, judge service: retry later"),
    (INTERRUPTED, "interrupted", "Ctrl-C"),
    (CLOSED_PIPE, "closed pipe", "the reader of stdout left (sforge list | head -1)"),
)


# Errors of higher layers, by dotted name (importing them would cost every command's start):
# a run stopped by Ctrl-C or SIGTERM, a run whose model API failed, a named task that fails
# to load, the judge service.
BY_NAME = {"sforge.runs.signals.Interrupted": "interrupted",
           "sforge.runs.runner.RunFailed": "failed",
           "sforge.cli.common.BrokenTask": "failed",
           "sforge.service.client.ServiceError": "service"}
CODES = {"usage": USAGE, "input": INPUT, "infrastructure": INFRASTRUCTURE, "failed": FAILED,
         "interrupted": INTERRUPTED}


def error_kind(exc: SforgeError) -> str:
    """"usage" (fix the command line), "infrastructure" (Docker, registry, judge service:
    retry later), "input" (fix the file, task or archive you gave), or for a run "failed"
    or "interrupted"."""
    if isinstance(exc, UsageError):
        return "usage"
    if isinstance(exc, InfrastructureError):
        return "infrastructure"
    for cls in type(exc).__mro__:
        kind = BY_NAME.get(f"{cls.__module__}.{cls.__qualname__}")
        if kind == "service":  # unreachable (status 0) or failing (5xx); a 4xx refused input
            status = getattr(exc, "status", 0)
            return "infrastructure" if status == 0 or status >= 500 else "input"
        if kind:
            return kind
    return "input"


def exit_code(exc: SforgeError) -> int:
    """The exit code of a command that stopped on `exc`."""
    return CODES[error_kind(exc)]


def failed_jobs_code(failures: list[BaseException | None]) -> int:
    """The exit code of a command whose jobs failed, given why each did (None: not known
    here, the job ran in another process): INFRASTRUCTURE when every one failed on the
    infrastructure (nothing was decided: retry later), else FAILED."""
    if failures and all(isinstance(exc, SforgeError) and error_kind(exc) == "infrastructure"
                        for exc in failures):
        return INFRASTRUCTURE
    return FAILED


def exit_codes_text() -> str:
    """The table for `sforge --help`'s epilog."""
    return "exit codes:\n" + "".join(f"  {code:<4} {kind:<15} {meaning}\n"
                                     for code, kind, meaning in EXIT_CODES)
