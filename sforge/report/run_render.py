"""The runs pages' HTML: the runs table and one run's page (its rounds with each submission's
verdict, score and failed per-test details from its result file; its transcript as collapsed
messages, tool calls and tool results with a search box). Everything an agent wrote is
escaped by the templates (autoescape): a transcript is hostile input."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from sforge import __version__
from sforge.benchmark.layout import AGENT_LOG, Layout, attempt_files
from sforge.core.fileio import atomic_write_text
from sforge.grading.feedback import Detail, read_feedback
from sforge.report.transcript import read_transcript
from sforge.report.views import verdict
from sforge.scores.run_listing import RunFolder

PASSING = {"pass", "passed", "ok", "success", "succeeded", "correct", "valid"}
UP = "../../../"  # from report/runs/<run>/ to the results folder


@dataclass
class RoundView:
    """One submission (or game session) of a run, as its page shows it."""
    round: Any
    id: Any
    final: bool
    state: str
    verdict: str
    score: str
    rescaled: str
    elapsed: str
    summary: str
    reason: str
    result: str | None                # link to the result JSON
    failed: list[Detail] = field(default_factory=list)
    n_details: int = 0
    error: str | None = None


def _num(x: Any, digits: int = 6) -> str:
    return f"{x:.{digits}g}" if isinstance(x, int | float) and not isinstance(x, bool) else ""


def round_views(root: Path, found: RunFolder) -> list[RoundView]:
    """The run's submissions (a game's sessions), each with its result file's failed
    details when the record names its eval key."""
    layout = Layout(root)
    record = found.record
    subs = record.get("sessions") if record.get("sessions") is not None \
        else record.get("submissions")
    out = []
    for sub in subs if isinstance(subs, list) else []:
        if not isinstance(sub, dict):
            continue
        key = sub.get("key")
        failed: list[Detail] = []
        n_details, error, link = 0, None, None
        if isinstance(key, str) and key:
            path = layout.eval_result(found.task, key)
            if path.is_file():
                link = f"{UP}evals/{quote(found.task)}/{quote(key)}.json"
                feedback = read_feedback(path)
                n_details, error = len(feedback.details), feedback.error
                failed = [d for d in feedback.details if d.status.lower() not in PASSING]
        out.append(RoundView(
            round=sub.get("round"), id=sub.get("id"), final=bool(sub.get("final")),
            state=str(sub.get("state") or ""),
            verdict=verdict(bool(sub.get("valid")), sub.get("reason"))
            if sub.get("valid") is not None else str(sub.get("state") or ""),
            score=_num(sub.get("score")), rescaled=_num(sub.get("rescaled"), 4),
            elapsed=_num(sub.get("elapsed_s"), 4), summary=str(sub.get("summary") or ""),
            reason=str(sub.get("reason") or ""), result=link, failed=failed,
            n_details=n_details, error=error))
    return out


def _files(found: RunFolder) -> list[tuple[str, str]]:
    """(name, link) of the run folder's own files a person opens: the latest attempt's
    agent.log, then each earlier attempt's log and record."""
    base = f"{UP}runs/{quote(found.run)}/{quote(found.task)}/{found.repeat}/"
    names = ["run.json", AGENT_LOG, "transcript.jsonl", "running.json",
             *(p.name for _, p in attempt_files(found.path, "log")),
             *(p.name for _, p in attempt_files(found.path, "record"))]
    return [(n, base + quote(n)) for n in names if (found.path / n).is_file()]


def write_run_page(env: jinja2.Environment, root: Path, bench_name: str, found: RunFolder,
                   out: Path) -> Path:
    """report/runs/<run>/<task>-<repeat>.html."""
    transcript_path = found.path / "transcript.jsonl"
    transcript = read_transcript(transcript_path) if transcript_path.is_file() else None
    facts = [(k, found.record.get(k)) for k in (
        "agent", "model", "source", "started_at", "ended_at", "elapsed_s", "stopped_by",
        "exit_code", "resumes", "best_score", "best_rescaled", "best_round", "tokens")]
    html = env.get_template("run.html.j2").render(
        bench_name=bench_name, run=found, facts=[(k, v) for k, v in facts if v is not None],
        error=found.record.get("error"), rounds=round_views(root, found),
        files=_files(found), transcript=transcript, index="../../../report.html",
        runs_page="../../runs.html")
    atomic_write_text(out, html)
    return out


def write_runs_index(env: jinja2.Environment, bench_name: str, rows: list[dict[str, Any]],
                     links: list[str], out: Path) -> Path:
    """report/runs.html: one row per run × task × repeat, linking its page (`links`,
    relative to report/)."""
    html = env.get_template("runs.html.j2").render(
        bench_name=bench_name, rows=list(zip(rows, links, strict=True)),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), version=__version__,
        index="../report.html")
    atomic_write_text(out, html)
    return out
