"""The tables and pages of a results directory brought up to date, the one way every caller
makes them (`sforge report` and the Snakemake report rule): only the tasks whose folder
fingerprint changed are listed, computed and rendered; the rest comes from the stores. One
writer at a time per results directory."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from sforge import __version__
from sforge.core.bulk import no_gc
from sforge.core.fileio import exclusive
from sforge.core.joblog import job_log
from sforge.plan.pipeline import Pipeline
from sforge.report.run_pages import update_run_pages
from sforge.report.state import report_current
from sforge.scores import folders
from sforge.scores.cache import cache_path
from sforge.scores.store import TablePaths, fresh_tasks, stored_parts_if_current

if TYPE_CHECKING:
    import jinja2

STEPS = ("scores", "best", "leaderboard", "report")  # the step logs the products leave


def budgets_hours(pipe: Pipeline) -> list[float]:
    """The time budgets of budgets.csv, in hours (config `budgets_hours`)."""
    return [float(h) for h in pipe.config.get("budgets_hours", [])]


def table_paths(pipe: Pipeline) -> TablePaths:
    """Where the five tables of the results directory go."""
    lay = pipe.layout
    return TablePaths(lay.scores, lay.best, lay.leaderboard, lay.leaderboard_md, lay.budgets)


def products_lock(pipe: Pipeline) -> contextlib.AbstractContextManager[None]:
    """One writer of a results directory's tables and pages at a time (every path that
    writes them takes it): two reports interleaving their writes left the best.csv of one
    beside the scores.csv of the other, under a store that said nothing changed."""
    root = pipe.layout.root
    return exclusive(pipe.layout.cache / "tables.lock", lambda: print(
        f"sforge: waiting for another report on {root} to finish its tables and pages",
        file=sys.stderr, flush=True))


def task_fingerprints(pipe: Pipeline, ids: list[str] | None = None) -> dict[str, str | None]:
    """task → the folder fingerprint of its tables (sforge.scores.folders)."""
    judges = {t: refs["judge"] for t, refs in pipe.refs.items() if "judge" in refs}
    head = json.dumps([__version__, budgets_hours(pipe)])
    return folders.fingerprints(pipe.bench, judges, [pipe.submissions_dir, pipe.layout.store],
                                pipe.layout.evals, head, ids, limits=pipe.key_limits)


def stale_tasks(pipe: Pipeline, prints: dict[str, str | None]) -> list[str]:
    """The tasks whose tables cannot be taken from the cache as they are."""
    fresh = fresh_tasks(pipe.layout.scores, prints)
    return [t for t in prints if t not in fresh]


def update_products(pipe: Pipeline, prints: dict[str, str | None],
                    known: dict[str, tuple[Any, ...]] | None = None) -> int:
    """The tables and pages: only the tasks whose fingerprint changed are listed, computed
    and rendered; the rest comes from the cache (no DAG, no reading of up-to-date results).
    `known`: the result fields grading's check has just read. → how many tasks were
    computed again."""
    with products_lock(pipe):
        made = _update(pipe, prints, known)
        written = update_run_pages(pipe.layout.root, pipe.bench.name, _environment)
        if written:
            logging.getLogger("sforge.report.pages").info("%d runs page(s) written",
                                                          len(written))
        return made


def _environment() -> jinja2.Environment:
    """The report's templates, imported only when a page is to be rendered."""
    from sforge.report.pages import environment  # start-up: pandas and the templates

    return environment()


def _update(pipe: Pipeline, prints: dict[str, str | None],
            known: dict[str, tuple[Any, ...]] | None) -> int:
    lay = pipe.layout
    tables = table_paths(pipe)
    # Nothing changed (the usual report of a CI job that graded nothing new): decided from
    # the stores alone, without importing pandas and the templates (~0.5 s).
    stored = stored_parts_if_current(lay.scores, prints, tables.every())
    if stored is not None and report_current(pipe.bench, lay.report, stored, prints):
        with job_log(lay.step_log("scores"), "scores.csv (tables by task)"):
            logging.getLogger("sforge.scores").info(
                "nothing changed: %d task(s) taken from the cache", len(stored))
        return 0
    # start-up: pandas and the templates (~0.7 s), only when something is to be made
    from sforge.report.pages import update_report
    from sforge.scores.parts import update_tables  # start-up: pandas
    from sforge.scores.ranking import score_rows  # start-up: pandas

    with job_log(lay.step_log("scores"), "scores.csv (tables by task)"), no_gc():
        update = update_tables(pipe.bench, tables, budgets_hours(pipe), prints,
                               pipe.record_rows, lambda ids: task_fingerprints(pipe, ids),
                               known)
        logging.getLogger("sforge.scores").info(
            "%d submission(s); %d task(s) computed, %d taken from the cache",
            sum(p["index"]["graded"] for p in update.parts.values()), len(update.made),
            len(update.parts) - len(update.made))
    for step in ("best", "leaderboard"):
        with job_log(lay.step_log(step), f"{step}: made with scores.csv, from per-task parts"):
            pass
    with job_log(lay.step_log("report"), "report.html"), no_gc():
        pages = update_report(pipe.bench, update, lay.best, lay.leaderboard, lay.budgets,
                              lay.report, lambda ids: score_rows(
                                  pipe.bench, pipe.record_rows(ids), cache_path(lay.scores),
                                  prune=False))
        logging.getLogger("sforge.report.pages").info("%d page(s) written", len(pages))
    return len(update.made)
