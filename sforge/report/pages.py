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
A source keeps its colour on every page and plot. What the pages show is made in
sforge.report.views, their longest HTML in sforge.report.markup; here they are rendered
and written.

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
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from sforge import __version__
from sforge.benchmark.model import Benchmark, Task
from sforge.core.fileio import atomic_write_bytes, atomic_write_text, user_cache
from sforge.core.forking import fork_map
from sforge.report.markup import submission_html, table_html
from sforge.report.plots import (
    TaskPoints,
    budgets_svg,
    leaderboard_svg,
    task_distribution_svg,
    task_time_svg,
)
from sforge.report.provenance import add_judge_column, add_proof_column, proof_fact
from sforge.report.run_pages import update_run_pages
from sforge.report.state import (
    PAGES_VERSION,
    RUNS_PAGE,
    entry_colors,
    kept_pages,
    page_state_path,
    page_wants,
    pages_to_render,
    stored_pages,
)
from sforge.report.views import (
    Linker,
    best_views,
    budget_table,
    invalid_rows,
    leaderboard_table,
    newest_invalid,
    repeats_table,
    submission_views,
    task_facts,
    task_table,
)
from sforge.scores import not_valid_rows, read_best, read_budgets, read_leaderboard, read_scores
from sforge.scores.cache import dump_bytes
from sforge.scores.parts import PartsUpdate, index_entry
from sforge.scores.proofs import Proof, read_proofs
from sforge.scores.repeats import PASS_K, SOLVED_AT, write_repeats
from sforge.scores.tables import SCORES_COLUMNS, empty_table


def _page_key(bench: Benchmark, task: Task, rows: pd.DataFrame, colors: dict[str, str],
              link: Linker, proofs: dict[str, Proof]) -> str:
    """Everything a task page shows, hashed: its rows, its result files (by stat), the task
    definition and the colours of its sources."""
    h = hashlib.sha256()
    h.update(repr((__version__, PAGES_VERSION, task.id, task.name, task.version, task.score,
                   sorted(task.metadata.items(), key=str), bench.excluded(task),
                   sorted((s, colors.get(s)) for s in rows["source"].unique()),
                   proof_fact(proofs))).encode())
    h.update(rows.to_csv(index=False).encode("utf-8", "surrogatepass"))
    for t, k in sorted(set(zip(rows["task"], rows["key"], strict=True))):
        for path in (link.layout.eval_result(t, k), link.layout.eval_log(t, k)):
            try:
                st = os.stat(path)
                h.update(f"{path.name}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode())
            except FileNotFoundError:
                h.update(f"{path.name}:-".encode())
    return h.hexdigest()[:32]


def render_task_page(env: jinja2.Environment, bench: Benchmark, task: Task,
                     rows: pd.DataFrame, best: pd.DataFrame, colors: dict[str, str],
                     link: Linker, proofs: dict[str, Proof]) -> str:
    """A task's page: its facts, bests, plots, invalid submissions and every submission."""
    points = TaskPoints(rows)
    time_plot = task_time_svg(task, points, colors)
    dist_plot = task_distribution_svg(task, points, colors)
    bad = not_valid_rows(rows)
    return env.get_template("task.html.j2").render(
        bench=bench, task=task, facts=[*task_facts(bench, task), proof_fact(proofs)],
        n_graded=len(rows),
        n_valid=int(rows["valid"].sum()), best=best_views(best, colors),
        time_plot=time_plot, dist_plot=dist_plot,
        invalid=invalid_rows(bad, colors, link, from_index=False),
        submissions=Markup("".join(submission_html(i, v) for i, v in enumerate(
            submission_views(rows, colors, link), start=1))),
        index="../report.html")


def write_task_pages(env: jinja2.Environment, bench: Benchmark, scores: pd.DataFrame,
                     best: pd.DataFrame, colors: dict[str, str], link: Linker, pages: Path,
                     cache: Path | None, proofs: dict[str, dict[str, Proof]]) -> list[Path]:
    """report/<task>.html for every task; an unchanged page is copied from the cache."""
    by_task = dict(tuple(scores.groupby("task", sort=False)))
    best_by_task = dict(tuple(best.groupby("task", sort=False)))
    used: set[str] = set()
    written = []
    for task in bench.tasks.values():
        rows = by_task.get(task.id, scores.iloc[0:0])
        key = _page_key(bench, task, rows, colors, link, proofs.get(task.id, {}))
        cached = cache / f"{key}.html" if cache is not None else None
        if cached is not None and cached.is_file():
            html = cached.read_text()
        else:
            html = render_task_page(env, bench, task, rows,
                                    best_by_task.get(task.id, best.iloc[0:0]), colors, link,
                                    proofs.get(task.id, {}))
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
    keep = {p.name for p in written} | {RUNS_PAGE}
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
    """The report's templates, strict about undefined names, compiled once per text."""
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


def render_index(env: jinja2.Environment, bench: Benchmark, entries: dict[str, dict[str, Any]],
                 best: pd.DataFrame, board: pd.DataFrame, budgets: pd.DataFrame,
                 colors: dict[str, str], link: Linker,
                 proofs: dict[str, dict[str, Proof]]) -> str:
    """entries: task → index_entry of its rows of scores.csv; proofs: read_proofs. Also
    writes leaderboard_repeats.csv beside it (the repeats table it shows)."""
    sources = list(board["source"]) if len(board) else sorted(colors)
    repeats = write_repeats(bench, board, best, link.layout.leaderboard_repeats)
    repeats_header, repeats_rows = repeats_table(repeats)
    board_header, board_rows = leaderboard_table(bench, board, colors)
    add_judge_column(board, board_header, board_rows, entries)
    task_header, task_rows = task_table(bench, best, entries, sources, colors, link)
    add_proof_column(bench, task_header, task_rows, proofs, 4)
    budget_header, budget_rows = budget_table(budgets, colors)
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
        repeats_rows=repeats_rows if (repeats["repeats"] > 1).any() else [],
        repeats_table=table_html("repeats-table", repeats_header, repeats_rows, 3),
        solved_at=f"{SOLVED_AT:g}", pass_k=", ".join(map(str, PASS_K)),
        budget_rows=budget_rows,
        budget_table=table_html("budgets-table", budget_header, budget_rows, 1),
        budget_plot=budgets_svg(budgets, colors),
        task_table=table_html("task-table", task_header, task_rows, 5),
        invalid=invalid_rows(newest_invalid(entries), colors, link, from_index=True),
        n_invalid=n_invalid,
        invalid_by_task={t: e["invalid"] for t, e in entries.items() if e["invalid"]},
        index="report.html")


def write_report(benchmark: Benchmark, scores_csv: Path, best_csv: Path, leaderboard_csv: Path,
                 budgets_csv: Path, out_html: Path, *, cache: bool = True) -> list[Path]:
    """report.html and report/<task>.html beside it, from the four tables and the result
    files of the folder they are in, and the runs pages (sforge.report.run_pages).
    cache=True keeps task pages in .cache/ so an unchanged task is not rendered again.
    Returns the pages written, the index first."""
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
    proofs = read_proofs(benchmark, root)
    pages = write_task_pages(env, benchmark, scores, best, colors, link, link.layout.report_pages,
                             root / ".cache" / "report-pages" if cache else None, proofs)
    atomic_write_text(out_html, render_index(env, benchmark, entries, best, board, budgets,
                                             colors, link, proofs))
    runs = update_run_pages(root, benchmark.name, lambda: env)
    return [out_html, *pages, *runs]


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
    proofs = read_proofs(benchmark, root)
    wanted = page_wants(benchmark, entries, update.fingerprints, proofs)
    render = pages_to_render(benchmark, root, wanted, pages, update.made)
    written: list[Path] = []
    if render or update.changed or not out_html.is_file() \
            or not link.layout.leaderboard_repeats.is_file():
        env = environment()
        best = read_best(best_csv)
        made = set(update.made)
        frames = dict(tuple(update.frame.groupby("task", sort=False))) \
            if update.frame is not None and len(update.frame) else {}
        others = [t for t in render if t not in made]
        if others:
            frames.update(dict(tuple(rows_of(others).groupby("task", sort=False))))
        empty = empty_table(SCORES_COLUMNS)
        of_task = best["task"].to_numpy()

        def render_one(task_id: str) -> Path:
            html = render_task_page(env, benchmark, benchmark.tasks[task_id],
                                    frames.get(task_id, empty), best[of_task == task_id],
                                    colors, link, proofs.get(task_id, {}))
            out = pages_dir / Linker.page(task_id, from_index=False)
            atomic_write_text(out, html)
            return out

        written += fork_map(render_one, render, PAGES_PER_PROCESS)
        keep = {Linker.page(t, from_index=False) for t in benchmark.tasks} | {RUNS_PAGE}
        if pages_dir.is_dir():
            for old in pages_dir.glob("*.html"):  # tasks no longer in the benchmark
                if old.name not in keep:
                    old.unlink(missing_ok=True)
        atomic_write_text(out_html, render_index(
            env, benchmark, entries, best, read_leaderboard(leaderboard_csv),
            read_budgets(budgets_csv), colors, link, proofs))
        written.insert(0, out_html)
    fresh = kept_pages(wanted)
    if fresh != pages:
        state = page_state_path(root)
        try:
            atomic_write_bytes(state, dump_bytes({"version": PAGES_VERSION, "pages": fresh}))
        except OSError as exc:  # a read-only tree: every page rendered next time
            logging.getLogger(__name__).warning("cannot write %s: %s", state, exc)
    return written

