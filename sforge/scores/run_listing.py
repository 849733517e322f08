"""The agent runs under <results>/<bench>/runs/<run>/<task>/<repeat>/ read as table rows: one
reading of a run folder for `sforge runs` and the report's runs pages (which sit below the run
machinery, hence here). What a row shows of a run record beyond its state: why it stopped, the
agent's exit code, model tokens, cost and why a broken run failed."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sforge.benchmark.layout import attempt_files
from sforge.core.fileio import read_json

ERROR_CHARS = 160  # the table's error column; --json keeps the whole message
STATES = ("done", "failed", "interrupted", "running", "pending")


@dataclass(frozen=True)
class RunFolder:
    """One (run, task, repeat) folder and the record its state was read from."""
    run: str
    task: str
    repeat: int
    path: Path
    state: str
    record: dict[str, Any]
    attempts: int  # attempt-<n>.json files, the state's own included

    @property
    def earlier_attempts(self) -> int:
        """Attempts recorded before the one the state is read from (a running attempt has
        no attempt file yet; a done, failed or interrupted one has)."""
        return self.attempts if self.state in ("running", "pending") \
            else max(0, self.attempts - 1)


def record_state(record: dict[str, Any], default: str) -> str:
    """A record's own state (done, failed, interrupted), else what its file implies (older
    records have none)."""
    return record.get("state") or default


def usage_columns(record: dict[str, Any]) -> dict[str, Any]:
    """tokens_in (input, cache writes and reads alike), tokens_out, cost_usd (None when the
    model has no price in its agent.toml, or the agent no model)."""
    usage = record.get("usage") or {}
    inputs = [usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens",
                                      "cache_read_input_tokens")]
    return {
        "tokens_in": sum(v for v in inputs if isinstance(v, int)) if usage else None,
        "tokens_out": usage.get("output_tokens"),
        "cost_usd": usage.get("cost_usd"),
    }


def shorten_error(row: dict[str, Any]) -> dict[str, Any]:
    """The row for the table: a long error cut to ERROR_CHARS."""
    error = row.get("error")
    if isinstance(error, str) and len(error) > ERROR_CHARS:
        return {**row, "error": error[:ERROR_CHARS - 1] + "…"}
    return row


def _alive(info: dict[str, Any]) -> bool:
    """Whether the process of a running.json marker still runs (another host's: trusted)."""
    if info.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(info.get("pid", 0)), 0)
    except (OSError, ValueError):
        return False
    return True


def _record(path: Path) -> dict[str, Any]:
    """A run record; one that cannot be read is an empty record with the reason as error."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        return {"error": f"cannot read {path}: {exc}"}
    return data if isinstance(data, dict) else {"error": f"{path}: not a JSON object"}


def run_folders(root: Path, run_id: str | None = None) -> list[RunFolder]:
    """Every (run, task, repeat) folder under root/runs with its state: done (run.json),
    running (running.json of a live process), failed or interrupted (the last
    attempt-<n>.json), else pending."""
    found = []
    for folder in sorted((root / "runs").glob(f"{run_id or '*'}/*/*")):
        if not folder.is_dir() or not folder.name.isdigit():
            continue
        record: dict[str, Any] = {}
        state = "pending"
        attempts = [path for _, path in attempt_files(folder)]
        running = folder / "running.json"
        if (folder / "run.json").is_file():
            record, state = _record(folder / "run.json"), "done"
        elif running.is_file() and _alive(_record(running)):
            record, state = _record(running), "running"
        elif attempts:
            record = _record(attempts[-1])
            state = record_state(record, "interrupted")  # or failed
        found.append(RunFolder(folder.parent.parent.name, folder.parent.name,
                               int(folder.name), folder, state, record, len(attempts)))
    return found


def run_row(found: RunFolder) -> dict[str, Any]:
    """One row of the runs table (`sforge runs`, the report's runs page)."""
    record = found.record
    elapsed = record.get("elapsed_s")
    if found.state == "running" and record.get("started_at"):
        started = datetime.fromisoformat(record["started_at"])
        elapsed = round((datetime.now(UTC) - started).total_seconds(), 1)
    # stopped_by beside the state: a done run stopped by its timeout, a cancel or a cap
    # is not one its agent finished; then the agent's last exit code (None: it was stopped,
    # or never started), so a done run whose agent exited nonzero says so
    return {"run": found.run, "task": found.task, "repeat": found.repeat,
            "state": found.state, "stopped_by": record.get("stopped_by"),
            "exit_code": record.get("exit_code"), "agent": record.get("agent"),
            "model": record.get("model"),
            "best": record.get("best_score"), "rescaled": record.get("best_rescaled"),
            "rounds": record.get("rounds"), **usage_columns(record),
            "elapsed_s": elapsed, "attempts": found.attempts, "error": record.get("error")}


def list_runs(root: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every (run, task, repeat) under results/<bench>/runs with its state, as rows."""
    return [run_row(f) for f in run_folders(root, run_id)]
