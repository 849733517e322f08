"""report.html and one page per task: results a person can debug with.

The index (report.html) stays small at any scale: the leaderboard, time budgets, a
task × source table of rescaled bests, and the invalid and failed submissions (the newest
ones, each with its reason and links to its result JSON and judge log). Everything about
one task lives on its own page, report/<task>.html: every submission with its summary,
per-test details, metrics and rejected archive members, and plots whose points say on
hover which submission they are.

Each page is one self-contained file: styles, scripts and SVG plots are inline, and the
only links are relative ones into the results folder (task pages, result JSONs, judge
logs), so the folder can be served or zipped as it is. Nothing is fetched from a network.
A source keeps its colour on every page and plot.

Task pages are cached by a hash of what they show (the task's rows of scores.csv, the
stat of its result files, the task definition): a new result re-renders its own task only.
`sforge report` (update_report) does not even read scores.csv back: it renders the pages of
the tasks whose tables were computed anew (sforge.scores.parts) and of those whose sources
changed colour, and makes the index from what each task's part keeps for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup, escape

from sforge import __version__
from sforge.benchmark.layout import REPORT_PAGES, Layout
from sforge.benchmark.model import Benchmark, Task
from sforge.core.fileio import atomic_write_bytes, atomic_write_text, user_cache
from sforge.core.forking import fork_map
from sforge.grading.feedback import Detail, Feedback, read_feedback
from sforge.report.plots import (
    TaskPoints,
    budgets_svg,
    hours_text,
    leaderboard_svg,
    task_distribution_svg,
    task_time_svg,
)
from sforge.report.state import (
    _PAGES_VERSION,
    entry_colors,
    kept_pages,
    page_name,
    page_state_path,
    page_wants,
    pages_to_render,
    quote_name,
    stored_pages,
)
from sforge.scores import (
    category_columns,
    newest_first,
    not_valid_rows,
    read_best,
    read_budgets,
    read_leaderboard,
    read_scores,
)
from sforge.scores.cache import _cache_path, _dumps, cached_feedback
from sforge.scores.parts import INVALID_FIELDS, NEWEST_INVALID, PartsUpdate, index_entry
from sforge.scores.tables import SCORES_COLUMNS, _empty

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
    text: str
    sort: str = ""  # data-v: the value the sorting script compares
    style: str = ""
    title: str = ""
    href: str = ""
    color: str = ""  # a source's swatch


@dataclass
class Links:
    page: str  # relative URL of the task page
    result: str  # of the result JSON
    log: str | None  # of the judge log, when there is one


@dataclass
class SubmissionView:
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
        name = page_name(task_id)
        return f"{REPORT_PAGES}/{name}" if from_index else name

    def result(self, task_id: str, key: str, from_index: bool = True) -> Links:
        prefix = "" if from_index else "../"
        base = f"{prefix}evals/{quote_name(task_id)}/{quote_name(key)}"
        return Links(self.page(task_id, from_index), f"{base}.json",
                     f"{base}.log" if not self.check_logs or self._has_log(task_id, key)
                     else None)


# --------------------------------------------------------------------------- tables
def _source_cell(source: str, colors: dict[str, str]) -> Cell:
    return Cell(source, source, color=colors.get(source, ""))


def _leaderboard_table(bench: Benchmark, board: pd.DataFrame, colors: dict[str, str]
                       ) -> tuple[list[str], list[list[Cell]]]:
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


def _task_table(bench: Benchmark, best: pd.DataFrame, entries: dict[str, dict[str, Any]],
                sources: list[str], colors: dict[str, str], link: Linker
                ) -> tuple[list[str], list[list[Cell]]]:
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


def table_html(table_id: str, header: list[str], rows: list[list[Cell]],
               text_cols: int) -> Markup:
    """A sortable table of cells: the first `text_cols` columns text, the rest numbers
    (data-v is what the sorting script compares). Written directly, as submission_html
    is: the index's task table (200 tasks × every source) through the template's loops
    cost a report after one change 40 ms; the same markup, escaped by the same function."""
    e = _memo_escape
    out = [f'<div class="scroll">\n<table id="{e(table_id)}" class="sortable">\n<thead><tr>']
    out += [f'<th class="text">{e(h)}</th>' if i < text_cols else f"<th>{e(h)}</th>"
            for i, h in enumerate(header)]
    out.append("</tr></thead>\n<tbody>\n")
    for row in rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            out.append('<td class="text"' if i < text_cols else "<td")
            if c.sort:
                out.append(f' data-v="{e(c.sort)}"')
            if c.style:
                out.append(f' style="{e(c.style)}"')
            if c.title:
                out.append(f' title="{e(c.title)}"')
            out.append(">")
            if c.color:
                out.append(f'<span class="sw" style="background:{e(c.color)}"></span>')
            out.append(f'<a href="{e(c.href)}">{e(c.text)}</a></td>' if c.href
                       else f"{e(c.text)}</td>")
        out.append("</tr>\n")
    out.append("</tbody>\n</table>\n</div>")
    return Markup("".join(out))


def _budget_table(budgets: pd.DataFrame, colors: dict[str, str]
                  ) -> tuple[list[str], list[list[Cell]]]:
    if budgets.empty:
        return [], []
    wide = budgets.pivot(index="source", columns="budget_h", values="score")
    header = ["source", *[f"{h:g}h" for h in wide.columns]]
    rows = [[_source_cell(str(src), colors)]
            + [Cell(_fmt(v), _fmt(v, 9), _shade(v)) for v in vals]
            for src, vals in zip(wide.index, wide.to_numpy().tolist(), strict=True)]
    return header, rows


def _invalid_rows(bad: pd.DataFrame, colors: dict[str, str], link: Linker,
                  from_index: bool) -> list[dict[str, Any]]:
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
def _task_facts(bench: Benchmark, task: Task) -> list[tuple[str, str]]:
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


def _submission_views(rows: pd.DataFrame, colors: dict[str, str], link: Linker
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
                    cached_feedback(_cache_path(link.layout.scores), folder).items()}
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


_ESCAPED: dict[str, str] = {}


def _memo_escape(value: Any) -> str:
    """markupsafe's escape, remembered for text: a page repeats its sources, colours,
    verdicts, test names and statuses hundreds of times (escaping was a third of a cold
    page). Numbers are not remembered (1 and 1.0 are one key to a dict)."""
    if type(value) is not str:
        return str(escape(value))
    out = _ESCAPED.get(value)
    if out is None:
        if len(_ESCAPED) > 100_000:
            _ESCAPED.clear()
        out = _ESCAPED[value] = str(escape(value))
    return out


_DETAIL_ROWS: dict[Any, str] = {}


def _detail_row(d: Detail) -> str:
    """A row of a submission's details table, remembered: submissions mostly repeat the
    same tests with the same verdicts (a zero score by its sign too: -0.0 == 0.0)."""
    key = d if d.score != 0.0 else (d, str(d.score))
    out = _DETAIL_ROWS.get(key)
    if out is None:
        if len(_DETAIL_ROWS) > 100_000:
            _DETAIL_ROWS.clear()
        e = _memo_escape
        score = "" if d.score is None else f"{d.score:.6g}"
        out = _DETAIL_ROWS[key] = (
            f'<tr><td class="text">{e(d.test)}</td><td class="text">{e(d.status)}</td>\n'
            f'<td>{score}</td><td class="text long">{e(d.message)}</td></tr>\n')
    return out


def submission_html(index: int, s: SubmissionView) -> str:
    """One submission of a task page (the page's longest part: a task of 500 submissions
    with their details), written directly rather than through the template's loop, which
    cost 0.4 ms each; the same markup, escaped by the same function."""
    e = _memo_escape
    out = [f'<details class="submission" id="sub-{index}">\n<summary><span class="sw" '
           f'style="background:{e(s.color)}"></span>{e(s.source)} · {e(s.name)} ·\n'
           f'<span class="{e(s.verdict)}">{e(s.verdict)}</span>\n']
    if s.score:
        out.append(f" · raw {e(s.score)}")
    if s.rescaled:
        out.append(f" · rescaled {e(s.rescaled)}")
    if s.hours:
        out.append(f" · {e(s.hours)} h")
    out.append('</summary>\n<dl class="facts">\n')
    if s.summary:
        out.append(f"<dt>summary</dt><dd>{e(s.summary)}</dd>")
    if s.reason:
        out.append(f'<dt>reason</dt><dd class="reason">{e(s.reason)}</dd>')
    out.append(f"<dt>archive</dt><dd>{e(s.sha)}…</dd>\n")
    if s.agent or s.model:
        out.append(f"<dt>agent</dt><dd>{e(s.agent)} {e(s.model)}</dd>")
    if s.submitted:
        out.append(f"<dt>submitted</dt><dd>{e(s.submitted)}</dd>")
    out.append(f'<dt>graded</dt><dd>{e(s.graded)} in {e(s.duration)} s</dd>\n'
               f'<dt>files</dt><dd><a class="result-json" href="{e(s.links.result)}">'
               "result JSON</a>")
    if s.links.log:
        out.append(f' · <a class="judge-log" href="{e(s.links.log)}">judge log</a>')
    out.append("</dd>\n</dl>\n")
    f = s.feedback
    if f.error:
        out.append(f'<p class="failed">{e(f.error)}</p>')
    if f.details:
        out.append('<div class="scroll"><table class="details">\n<thead><tr><th class="text">'
                   'test</th><th class="text">status</th><th>score</th>\n<th class="text">'
                   "message</th></tr></thead>\n<tbody>\n")
        out += map(_detail_row, f.details)
        out.append("</tbody></table></div>\n")
    if f.metrics:
        out.append('<div class="scroll"><table class="metrics"><thead><tr><th class="text">'
                   "metric</th><th>value</th></tr></thead>\n<tbody>")
        out += [f'<tr><td class="text">{e(k)}</td><td>{e(v)}</td></tr>\n'
                for k, v in f.metrics.items()]
        out.append("</tbody></table></div>\n")
    if f.rejected:
        out.append('<p class="note">Refused archive members:</p>\n<ul>')
        out += [f"<li>{e(r['path'])}: {e(r['reason'])}</li>" for r in f.rejected]
        out.append("</ul>\n")
    out.append("</details>\n")
    return "".join(out)


def _page_key(bench: Benchmark, task: Task, rows: pd.DataFrame, colors: dict[str, str],
              link: Linker) -> str:
    """Everything a task page shows, hashed: its rows, its result files (by stat), the task
    definition and the colours of its sources."""
    h = hashlib.sha256()
    h.update(repr((__version__, task.id, task.name, task.version, task.score,
                   sorted(task.metadata.items(), key=str), bench.excluded(task),
                   sorted((s, colors.get(s)) for s in rows["source"].unique()))).encode())
    h.update(rows.to_csv(index=False).encode("utf-8", "surrogatepass"))
    for t, k in sorted(set(zip(rows["task"], rows["key"], strict=True))):
        for path in (link.layout.eval_result(t, k), link.layout.eval_log(t, k)):
            try:
                st = os.stat(path)
                h.update(f"{path.name}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode())
            except FileNotFoundError:
                h.update(f"{path.name}:-".encode())
    return h.hexdigest()[:32]


def _records(frame: pd.DataFrame, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """frame.to_dict("records") of `fields`, from column lists (a third of its cost on a
    task's few rows, where pandas' per-row work dominates)."""
    return [dict(zip(fields, values, strict=True))
            for values in zip(*(frame[c].tolist() for c in fields), strict=True)]


def _best_views(best: pd.DataFrame, colors: dict[str, str]) -> list[dict[str, str]]:
    return [{"source": r["source"], "color": colors.get(r["source"], ""),
             "score": _raw(r["score"]), "rescaled": _fmt(r["rescaled"]), "name": r["name"],
             "hours": _hours(r["elapsed_s"]), "valid": f"{r['valid_count']} of {r['submissions']}"}
            for r in _records(best, ("source", "score", "rescaled", "name", "elapsed_s",
                                     "valid_count", "submissions"))]


def render_task_page(env: jinja2.Environment, bench: Benchmark, task: Task,
                     rows: pd.DataFrame, best: pd.DataFrame, colors: dict[str, str],
                     link: Linker) -> str:
    points = TaskPoints(rows)
    time_plot = task_time_svg(task, points, colors)
    dist_plot = task_distribution_svg(task, points, colors)
    bad = not_valid_rows(rows)
    return env.get_template("task.html.j2").render(
        bench=bench, task=task, facts=_task_facts(bench, task), n_graded=len(rows),
        n_valid=int(rows["valid"].sum()), best=_best_views(best, colors),
        time_plot=time_plot, dist_plot=dist_plot,
        invalid=_invalid_rows(bad, colors, link, from_index=False),
        submissions=Markup("".join(submission_html(i, v) for i, v in enumerate(
            _submission_views(rows, colors, link), start=1))),
        index="../report.html")


def write_task_pages(env: jinja2.Environment, bench: Benchmark, scores: pd.DataFrame,
                     best: pd.DataFrame, colors: dict[str, str], link: Linker, pages: Path,
                     cache: Path | None) -> list[Path]:
    """report/<task>.html for every task; an unchanged page is copied from the cache."""
    by_task = dict(tuple(scores.groupby("task", sort=False)))
    best_by_task = dict(tuple(best.groupby("task", sort=False)))
    used: set[str] = set()
    written = []
    for task in bench.tasks.values():
        rows = by_task.get(task.id, scores.iloc[0:0])
        key = _page_key(bench, task, rows, colors, link)
        cached = cache / f"{key}.html" if cache is not None else None
        if cached is not None and cached.is_file():
            html = cached.read_text()
        else:
            html = render_task_page(env, bench, task, rows,
                                    best_by_task.get(task.id, best.iloc[0:0]), colors, link)
            if cached is not None:
                try:
                    atomic_write_text(cached, html)
                except OSError:
                    cached = None  # a read-only cache: same pages, slower next time
        if cached is not None:
            used.add(cached.name)
        out = pages / Linker.page(task.id, from_index=False)
        atomic_write_text(out, html)
        written.append(out)
    if cache is not None and cache.is_dir():
        for old in cache.glob("*.html"):
            if old.name not in used:
                old.unlink(missing_ok=True)
    keep = {p.name for p in written}
    for old in pages.glob("*.html"):  # tasks no longer in the benchmark
        if old.name not in keep:
            old.unlink(missing_ok=True)
    return written


# --------------------------------------------------------------------------- the index
class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """The templates compiled once per source text, kept in the user's cache: compiling
    them cost every report 50 ms, a tenth of updating it after one change. A cache that
    cannot be written only costs the compile."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


_TEMPLATE_OPTIONS: dict[str, Any] = {"autoescape": True, "trim_blocks": True,
                                     "lstrip_blocks": True}


def environment() -> jinja2.Environment:
    # Compiled code depends on the options too (jinja keys it by name and source only).
    options = hashlib.sha256(repr((jinja2.__version__, sorted(_TEMPLATE_OPTIONS.items())))
                             .encode()).hexdigest()[:12]
    cache: jinja2.BytecodeCache | None = None
    directory = user_cache(f"templates-{options}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        cache = _CompiledTemplates(str(directory))
    except OSError:  # a read-only home: compiled each time
        pass
    return jinja2.Environment(loader=jinja2.PackageLoader("sforge.report", "templates"),
                              undefined=jinja2.StrictUndefined, bytecode_cache=cache,
                              **_TEMPLATE_OPTIONS)


def _newest_invalid(entries: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The newest invalid rows of all tasks, from each task's newest (index_entry)."""
    columns: dict[str, list[Any]] = {c: [] for c in INVALID_FIELDS}
    for e in entries.values():
        if e["invalid"]:
            for c in INVALID_FIELDS:
                columns[c] += e["bad"][c]
    frame = pd.DataFrame({c: pd.Series(v, dtype="object") for c, v in columns.items()})
    return newest_first(frame).head(MAX_INVALID_ON_INDEX)


def render_index(env: jinja2.Environment, bench: Benchmark, entries: dict[str, dict[str, Any]],
                 best: pd.DataFrame, board: pd.DataFrame, budgets: pd.DataFrame,
                 colors: dict[str, str], link: Linker) -> str:
    """entries: task → index_entry of its rows of scores.csv."""
    sources = list(board["source"]) if len(board) else sorted(colors)
    board_header, board_rows = _leaderboard_table(bench, board, colors)
    task_header, task_rows = _task_table(bench, best, entries, sources, colors, link)
    budget_header, budget_rows = _budget_table(budgets, colors)
    n_graded = sum(e["graded"] for e in entries.values())
    n_invalid = sum(e["invalid"] for e in entries.values())
    return env.get_template("report.html.j2").render(
        bench=bench, n_tasks=len(bench.tasks), n_ranked=len(bench.ranked_tasks),
        excluded=sorted(t.id for t in bench.tasks.values() if bench.excluded(t)),
        n_sources=len(sources), n_graded=n_graded, n_valid=n_graded - n_invalid,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), version=__version__,
        errors=[str(e) for e in bench.errors],
        board_rows=board_rows,
        board_table=table_html("leaderboard-table", board_header, board_rows, 4),
        board_plot=leaderboard_svg(board, colors),
        budget_rows=budget_rows,
        budget_table=table_html("budgets-table", budget_header, budget_rows, 1),
        budget_plot=budgets_svg(budgets, colors),
        task_table=table_html("task-table", task_header, task_rows, 4),
        invalid=_invalid_rows(_newest_invalid(entries), colors, link, from_index=True),
        n_invalid=n_invalid,
        invalid_by_task={t: e["invalid"] for t, e in entries.items() if e["invalid"]},
        index="report.html")


def write_report(benchmark: Benchmark, scores_csv: Path, best_csv: Path, leaderboard_csv: Path,
                 budgets_csv: Path, out_html: Path, *, cache: bool = True) -> list[Path]:
    """report.html and report/<task>.html beside it, from the four tables and the result
    files of the folder they are in. cache=True keeps task pages in .cache/ so an
    unchanged task is not rendered again. Returns the pages written, the index first."""
    out_html = Path(out_html)
    root = out_html.parent
    env = environment()
    scores = read_scores(scores_csv)
    best = read_best(best_csv)
    board = read_leaderboard(leaderboard_csv)
    budgets = read_budgets(budgets_csv)
    entries = {str(t): index_entry(rows) for t, rows in scores.groupby("task", sort=True)}
    colors = entry_colors(entries)
    link = Linker(root)
    pages = write_task_pages(env, benchmark, scores, best, colors, link, link.layout.report_pages,
                             root / ".cache" / "report-pages" if cache else None)
    atomic_write_text(out_html, render_index(env, benchmark, entries, best, board, budgets,
                                             colors, link))
    return [out_html, *pages]


# Pages a worker process must have to be worth its start (sforge.core.forking: a fork, no
# import, no pickling of the tables; only the pages' paths come back).
PAGES_PER_PROCESS = 16


def update_report(benchmark: Benchmark, update: PartsUpdate, best_csv: Path,
                  leaderboard_csv: Path, budgets_csv: Path, out_html: Path,
                  rows_of: Callable[[list[str]], pd.DataFrame]) -> list[Path]:
    """report.html and the task pages after update_tables, without reading scores.csv.

    A task page is rendered again when its task was computed anew, when one of its sources
    changed colour (a source added or gone elsewhere shifts them), or when the page is
    missing; the others stay as they are on disk. `rows_of(tasks)` gives the rows of
    scores.csv of tasks that were not computed anew. → the pages written, the index first
    (none when nothing changed)."""
    out_html = Path(out_html)
    root = out_html.parent
    link = Linker(root)
    pages_dir = link.layout.report_pages
    entries = {t: p["index"] for t, p in update.parts.items()}
    colors = entry_colors(entries)
    pages = stored_pages(root)
    wanted = page_wants(benchmark, entries, update.fingerprints)
    render = pages_to_render(benchmark, root, wanted, pages, update.made)
    written: list[Path] = []
    if render or update.changed or not out_html.is_file():
        env = environment()
        best = read_best(best_csv)
        made = set(update.made)
        frames = dict(tuple(update.frame.groupby("task", sort=False))) \
            if update.frame is not None and len(update.frame) else {}
        others = [t for t in render if t not in made]
        if others:
            frames.update(dict(tuple(rows_of(others).groupby("task", sort=False))))
        empty = _empty(SCORES_COLUMNS)
        of_task = best["task"].to_numpy()

        def render_one(task_id: str) -> Path:
            html = render_task_page(env, benchmark, benchmark.tasks[task_id],
                                    frames.get(task_id, empty), best[of_task == task_id],
                                    colors, link)
            out = pages_dir / Linker.page(task_id, from_index=False)
            atomic_write_text(out, html)
            return out

        written += fork_map(render_one, render, PAGES_PER_PROCESS)
        keep = {Linker.page(t, from_index=False) for t in benchmark.tasks}
        if pages_dir.is_dir():
            for old in pages_dir.glob("*.html"):  # tasks no longer in the benchmark
                if old.name not in keep:
                    old.unlink(missing_ok=True)
        atomic_write_text(out_html, render_index(
            env, benchmark, entries, best, read_leaderboard(leaderboard_csv),
            read_budgets(budgets_csv), colors, link))
        written.insert(0, out_html)
    fresh = kept_pages(wanted)
    if fresh != pages:
        state = page_state_path(root)
        try:
            atomic_write_bytes(state, _dumps({"version": _PAGES_VERSION, "pages": fresh}))
        except OSError as exc:  # a read-only tree: every page rendered next time
            logging.getLogger(__name__).warning("cannot write %s: %s", state, exc)
    return written
