"""What the report's pages show, as plain values: formatted cells, the index's tables, a task
page's facts, bests and submissions, and the relative links between pages and into the
results folder. No HTML is written here (sforge.report.markup, the templates)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sforge.benchmark.layout import REPORT_PAGES, Layout
from sforge.benchmark.model import Benchmark, Task
from sforge.grading.feedback import Detail, Feedback, read_feedback
from sforge.report.plots import hours_text
from sforge.report.state import page_name, quote_name
from sforge.scores import category_columns, newest_first
from sforge.scores.cache import cache_path, cached_feedback
from sforge.scores.columns import INVALID_FIELDS, NEWEST_INVALID

MAX_INVALID_ON_INDEX = NEWEST_INVALID  # the newest; every one of them is on its task's page


# --------------------------------------------------------------------------- formatting
def _fmt(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float | np.floating):
        return f"{x:.{digits}f}"
    return str(x)


def _raw(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"


def _shade(x: float | None) -> str:
    """A background for a 0–100 cell: pale red at 0 through pale green at 100."""
    if x is None or math.isnan(x):
        return ""
    return f"background-color:hsl({round(1.2 * max(0.0, min(100.0, x)))},70%,85%)"


def _when(text: Any) -> str:
    return "" if not isinstance(text, str) or not text else text[:19].replace("T", " ")


def _hours(seconds: Any) -> str:
    return "" if seconds is None or pd.isna(seconds) else hours_text(seconds)


def verdict(valid: bool, reason: Any) -> str:
    """invalid: the grader said so; failed: sforge could not use the run (timeout, out of
    memory, no result.json, a refused archive), and the reason says which."""
    if valid:
        return "valid"
    return "failed" if isinstance(reason, str) and reason else "invalid"


@dataclass
class Cell:
    """One cell of a sortable table (markup.table_html)."""

    text: str
    sort: str = ""  # data-v: the value the sorting script compares
    style: str = ""
    title: str = ""
    href: str = ""
    color: str = ""  # a source's swatch


@dataclass
class Links:
    """Where a submission's page, result JSON and judge log are, relative to a page."""

    page: str  # relative URL of the task page
    result: str  # of the result JSON
    log: str | None  # of the judge log, when there is one


@dataclass
class SubmissionView:
    """One submission as a task page shows it (markup.submission_html)."""

    source: str
    color: str
    name: str
    sha: str
    key: str
    verdict: str
    score: str
    rescaled: str
    summary: str
    reason: str
    submitted: str
    hours: str
    graded: str
    duration: str
    agent: str
    model: str
    links: Links
    feedback: Feedback = field(default_factory=Feedback)


# A test of a grader's details counts as failed unless its status is one of these (any case):
# FAILED, ERROR, TIMEOUT, a grader's own word for it ("wrong", "crashed") all count.
NOT_FAILED_STATUSES = frozenset({"passed", "pass", "ok", "success", "succeeded", "skipped",
                                 "skip"})


def detail_failed(d: Detail) -> bool:
    """Whether a per-test detail is a failure, which a task page lists first and highlights:
    a status not in NOT_FAILED_STATUSES, or, without a status, a score of 0."""
    status = d.status.strip().lower()
    if not status:
        return d.score is not None and d.score <= 0
    return status not in NOT_FAILED_STATUSES


def failed_first(details: list[Detail]) -> list[Detail]:
    """A submission's details with the failed tests first, each part in the grader's order."""
    return sorted(details, key=lambda d: not detail_failed(d))


# --------------------------------------------------------------------------- links
class Linker:
    """Relative URLs between pages and into the results folder (layout.root)."""

    def __init__(self, root: Path, check_logs: bool = True):
        self.layout = Layout(root)
        self.check_logs = check_logs
        self._names: dict[str, set[str]] = {}  # evals/<task>/ → its file names

    def _has_log(self, task_id: str, key: str) -> bool:
        """One listing per result folder, not a stat per submission (100,000 of them)."""
        names = self._names.get(task_id)
        if names is None:
            try:
                names = set(os.listdir(self.layout.eval_log(task_id, key).parent))
            except OSError:
                names = set()
            self._names[task_id] = names
        return f"{key}.log" in names

    @staticmethod
    def page(task_id: str, from_index: bool = True) -> str:
        """The link to a task's page, from the index or (from_index False) from another page."""
        name = page_name(task_id)
        return f"{REPORT_PAGES}/{name}" if from_index else name

    def result(self, task_id: str, key: str, from_index: bool = True) -> Links:
        """The links of one result: its task page, JSON and (when the file exists) its log."""
        prefix = "" if from_index else "../"
        base = f"{prefix}evals/{quote_name(task_id)}/{quote_name(key)}"
        return Links(self.page(task_id, from_index), f"{base}.json",
                     f"{base}.log" if not self.check_logs or self._has_log(task_id, key)
                     else None)


# --------------------------------------------------------------------------- tables
def _source_cell(source: str, colors: dict[str, str]) -> Cell:
    return Cell(source, source, color=colors.get(source, ""))


def leaderboard_table(bench: Benchmark, board: pd.DataFrame, colors: dict[str, str]
                      ) -> tuple[list[str], list[list[Cell]]]:
    """The index's leaderboard: header and rows."""
    cats = list(category_columns(bench).values())
    header = ["rank", "source", "agent", "model", "score", *cats, "tasks with a valid result"]
    rows = []
    for rec in board.to_dict("records"):
        rows.append([
            Cell(_fmt(rec["rank"]), str(rec["rank"])),
            _source_cell(rec["source"], colors),
            Cell(_fmt(rec["agent"])),
            Cell(_fmt(rec["model"])),
            Cell(_fmt(rec["score"]), _fmt(rec["score"], 9), _shade(rec["score"])),
            *[Cell(_fmt(rec[c]), _fmt(rec[c], 9), _shade(rec[c])) for c in cats],
            Cell(f"{rec['tasks_valid']} / {rec['tasks']}", str(rec["tasks_valid"])),
        ])
    return header, rows


def task_table(bench: Benchmark, best: pd.DataFrame, entries: dict[str, dict[str, Any]],
               sources: list[str], colors: dict[str, str], link: Linker
               ) -> tuple[list[str], list[list[Cell]]]:
    """The index's task × source table of rescaled bests: header and rows."""
    header = ["task", "category", "status", "direction", "graded", "not valid", *sources]
    graded = {t: e["graded"] for t, e in entries.items()}
    bad = {t: e["invalid"] for t, e in entries.items()}
    lookup: dict[tuple[str, str], dict[str, Any]] = {}
    cols = ("task", "source", "rescaled", "score", "name")
    for rec in zip(*(best[c].tolist() for c in cols), strict=True):  # to_dict cost 4× this
        # the first row of a pair, as .loc would give
        lookup.setdefault((rec[0], rec[1]), dict(zip(cols[2:], rec[2:], strict=True)))
    rows = []
    for task in bench.tasks.values():
        status = str(task.metadata.get("status", ""))
        n, b = int(graded.get(task.id, 0)), int(bad.get(task.id, 0))
        row = [Cell(task.id, task.id, title=task.name, href=link.page(task.id)),
               Cell(task.category or ""),
               Cell(status + (" (not ranked)" if bench.excluded(task) else ""), status),
               Cell(task.score.direction), Cell(str(n), str(n)),
               Cell(str(b) if b else "", str(b), "background-color:#fbe3e3" if b else "")]
        for source in sources:
            r = lookup.get((task.id, source))
            if r is None:
                row.append(Cell("—", "-1", title=f"{source}: no valid result, counts 0"))
                continue
            if pd.isna(r["rescaled"]):
                row.append(Cell(f"raw {_raw(r['score'])}", "-0.5",
                                title=f"{source}: no rescale table, counts 0 in the mean"))
            else:
                row.append(Cell(_fmt(r["rescaled"]), _fmt(r["rescaled"], 9),
                                _shade(r["rescaled"]),
                                title=f"{source}: raw {_raw(r['score'])} · {r['name']}"))
        rows.append(row)
    return header, rows


def repeats_table(repeats: pd.DataFrame) -> tuple[list[str], list[list[Cell]]]:
    """The index's repeats table (sforge.scores.repeats): header and rows."""
    passes = [c for c in repeats.columns if c.startswith("pass@")]
    header = ["agent", "model", "sources", "n", "mean", "95% CI", "best-of-n", *passes]
    rows = []
    for rec in repeats.to_dict("records"):
        ci = "" if pd.isna(rec["ci95_low"]) else \
            f"{_fmt(rec['ci95_low'])} – {_fmt(rec['ci95_high'])}"
        rows.append([
            Cell(_fmt(rec["agent"])), Cell(_fmt(rec["model"])),
            Cell(_fmt(rec["sources"]).replace(",", ", ")),
            Cell(str(rec["repeats"]), str(rec["repeats"])),
            Cell(_fmt(rec["mean"]), _fmt(rec["mean"], 9), _shade(rec["mean"]),
                 title="" if pd.isna(rec["sd"]) else f"sd {_fmt(rec['sd'])}"),
            Cell(ci, _fmt(rec["ci95_low"], 9)),
            Cell(_fmt(rec["best_of_n"]), _fmt(rec["best_of_n"], 9), _shade(rec["best_of_n"])),
            *[Cell(_fmt(rec[c], 3), _fmt(rec[c], 9)) for c in passes],
        ])
    return header, rows


def budget_table(budgets: pd.DataFrame, colors: dict[str, str]
                 ) -> tuple[list[str], list[list[Cell]]]:
    """The index's time budgets, one column per budget: header and rows."""
    if budgets.empty:
        return [], []
    wide = budgets.pivot(index="source", columns="budget_h", values="score")
    header = ["source", *[f"{h:g}h" for h in wide.columns]]
    rows = [[_source_cell(str(src), colors)]
            + [Cell(_fmt(v), _fmt(v, 9), _shade(v)) for v in vals]
            for src, vals in zip(wide.index, wide.to_numpy().tolist(), strict=True)]
    return header, rows


def invalid_rows(bad: pd.DataFrame, colors: dict[str, str], link: Linker,
                 from_index: bool) -> list[dict[str, Any]]:
    """The invalid and failed submissions `bad`, each with its verdict, reason and links."""
    out = []
    for r in _records(bad, ("task", "source", "name", "reason", "summary", "graded_at", "key")):
        out.append({
            "task": r["task"], "source": r["source"], "color": colors.get(r["source"], ""),
            "name": r["name"], "verdict": verdict(False, r["reason"]),
            "reason": r["reason"] if isinstance(r["reason"], str) and r["reason"]
            else (r["summary"] if isinstance(r["summary"], str) else ""),
            "graded": _when(r["graded_at"]),
            "links": link.result(r["task"], r["key"], from_index),
        })
    return out


# --------------------------------------------------------------------------- task pages
def task_facts(bench: Benchmark, task: Task) -> list[tuple[str, str]]:
    """What a task page says of the task: name, category, direction, rescale, version."""
    table = task.score.rescale
    rescale = "none (counts 0 on the leaderboard)" if table is None else \
        f"{table['kind']}(" + ", ".join(f"{k}={v}" for k, v in table.items()
                                        if k != "kind") + ")"
    facts = [("name", task.name), ("category", task.category or ""),
             ("direction", task.score.direction), ("rescale", rescale),
             ("version", task.version)]
    if "status" in task.metadata:
        status = str(task.metadata["status"])
        facts.append(("status", status + (" — left out of the leaderboard"
                                          if bench.excluded(task) else "")))
    return facts


_VIEW_COLUMNS = ("task", "key", "source", "name", "submission", "valid", "reason", "score",
                 "rescaled", "summary", "submitted_at", "elapsed_s", "graded_at", "duration_s",
                 "agent", "model")


def _nan_last(value: Any) -> tuple[int, Any]:
    """A sort key putting missing values (NaN, None) after all others, as pandas does."""
    return (1, 0) if value is None or value != value else (0, value)


def submission_views(rows: pd.DataFrame, colors: dict[str, str], link: Linker
                     ) -> list[SubmissionView]:
    """The task's submissions by source, then time submitted, agent time and name (missing
    values last; ties in row order)."""
    cols = [rows[c].tolist() for c in _VIEW_COLUMNS]  # to_dict("records") cost 3× this
    tasks = set(cols[0])
    # One task's results are one folder, whose cache shard holds the very parse the rows
    # were made from; a file it lacks (no cache, another folder) is read.
    feedback: dict[str, Feedback] = {}
    if len(tasks) == 1:
        folder = os.path.abspath(link.layout.eval_result(str(next(iter(tasks))), "-").parent)
        feedback = {name.removesuffix(".json"): f for name, f in
                    cached_feedback(cache_path(link.layout.scores), folder).items()}
    at = {c: i for i, c in enumerate(_VIEW_COLUMNS)}
    keys = [cols[at[c]] for c in ("source", "submitted_at", "elapsed_s", "name")]
    order = sorted(range(len(rows)), key=lambda i: tuple(_nan_last(k[i]) for k in keys))
    out = []
    for values in zip(*([c[i] for i in order] for c in cols), strict=True):
        (task, key, source, name, submission, valid, reason, score, rescaled, summary,
         submitted_at, elapsed_s, graded_at, duration_s, agent, model) = values
        found = feedback.get(key)
        if found is None:
            found = feedback[key] = read_feedback(link.layout.eval_result(task, key))
        out.append(SubmissionView(
            source=source, color=colors.get(source, ""), name=name, sha=submission[:12],
            key=key, verdict=verdict(valid, reason), score=_raw(score),
            rescaled=_fmt(rescaled), summary=summary if isinstance(summary, str) else "",
            reason=reason if isinstance(reason, str) else "", submitted=_when(submitted_at),
            hours=_hours(elapsed_s), graded=_when(graded_at), duration=_fmt(duration_s, 1),
            agent=_fmt(agent), model=_fmt(model),
            links=link.result(task, key, from_index=False), feedback=found))
    return out


def _records(frame: pd.DataFrame, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """frame.to_dict("records") of `fields`, from column lists (a third of its cost on a
    task's few rows, where pandas' per-row work dominates)."""
    return [dict(zip(fields, values, strict=True))
            for values in zip(*(frame[c].tolist() for c in fields), strict=True)]


def best_views(best: pd.DataFrame, colors: dict[str, str]) -> list[dict[str, str]]:
    """A task's best result per source, as its page lists them."""
    return [{"source": r["source"], "color": colors.get(r["source"], ""),
             "score": _raw(r["score"]), "rescaled": _fmt(r["rescaled"]), "name": r["name"],
             "hours": _hours(r["elapsed_s"]), "valid": f"{r['valid_count']} of {r['submissions']}"}
            for r in _records(best, ("source", "score", "rescaled", "name", "elapsed_s",
                                     "valid_count", "submissions"))]


def newest_invalid(entries: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The newest invalid rows of all tasks, from each task's newest (index_entry)."""
    columns: dict[str, list[Any]] = {c: [] for c in INVALID_FIELDS}
    for e in entries.values():
        if e["invalid"]:
            for c in INVALID_FIELDS:
                columns[c] += e["bad"][c]
    frame = pd.DataFrame({c: pd.Series(v, dtype="object") for c, v in columns.items()})
    return newest_first(frame).head(MAX_INVALID_ON_INDEX)


