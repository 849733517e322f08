"""The report's runs pages, brought up to date: report/runs.html (one row per run × task ×
repeat, read as `sforge runs` reads them) and report/runs/<run>/<task>-<repeat>.html (its
rounds and transcript). Incremental like the task pages: a run page is rendered again only
when its folder changed (the stat of its files, its state) or the page is missing."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sforge import __version__
from sforge.benchmark.layout import Layout
from sforge.core.fileio import atomic_write_bytes
from sforge.report.state import RUNS_PAGE, quote_name
from sforge.scores.cache import dump_bytes, load_bytes
from sforge.scores.run_listing import RunFolder, run_folders, run_row

if TYPE_CHECKING:
    import jinja2

RUNS_VERSION = "3"  # the pages change: every page rendered again
RUNS_DIR = "runs"        # report/runs/<run>/<task>-<repeat>.html


def run_page(found: RunFolder) -> str:
    """A run page's path under report/ (a link to it quotes it once more)."""
    return f"{RUNS_DIR}/{quote_name(found.run)}/{quote_name(found.task)}-{found.repeat}.html"


def runs_state_path(root: Path) -> Path:
    """What the runs pages on disk were rendered from."""
    return root / ".cache" / "report-runs.json"


def folder_fingerprint(found: RunFolder) -> str:
    """A run folder's files by name, size and mtime, with its state and sforge's version:
    what its page is made from (the result files are written before the run record)."""
    h = hashlib.sha256(repr((__version__, found.state, found.attempts)).encode())
    try:
        entries = sorted(found.path.iterdir())
    except OSError:
        entries = []
    for path in entries:
        try:
            st = path.stat()
        except OSError:
            continue
        h.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _stored(root: Path) -> dict[str, Any]:
    try:
        state = load_bytes(runs_state_path(root).read_bytes())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) and state.get("version") == RUNS_VERSION else {}


def update_run_pages(root: Path, bench_name: str,
                     environment: Callable[[], jinja2.Environment]) -> list[Path]:
    """runs.html and the pages of the runs whose folder changed; pages of runs gone are
    removed. `environment`: the report's templates (sforge.report.pages.environment),
    asked for only when something is rendered. → the pages written (none when nothing
    changed)."""
    pages_dir = Layout(root).report_pages
    folders = run_folders(root)
    rows = [run_row(f) for f in folders]
    index_key = hashlib.sha256(json.dumps([__version__, bench_name, rows], default=str)
                               .encode()).hexdigest()[:32]
    wanted = {run_page(f): folder_fingerprint(f) for f in folders}
    stored = _stored(root)
    pages: dict[str, Any] = stored["pages"] if isinstance(stored.get("pages"), dict) else {}
    render = [f for f in folders if pages.get(run_page(f)) != wanted[run_page(f)]
              or not (pages_dir / run_page(f)).is_file()]
    index = pages_dir / RUNS_PAGE
    redo_index = stored.get("index") != index_key or not index.is_file()
    written: list[Path] = []
    if render or redo_index:
        # start-up: jinja, only when something is rendered
        from sforge.report.run_render import write_run_page, write_runs_index
        env = environment()
        written += [write_run_page(env, root, bench_name, f, pages_dir / run_page(f))
                    for f in render]
        if redo_index:
            written.insert(0, write_runs_index(env, bench_name, rows,
                                                [quote(run_page(f)) for f in folders], index))
    runs_dir = pages_dir / RUNS_DIR
    if runs_dir.is_dir():
        for old in runs_dir.glob("*/*.html"):  # runs no longer there
            if old.relative_to(pages_dir).as_posix() not in wanted:
                old.unlink(missing_ok=True)
    fresh = {"version": RUNS_VERSION, "pages": wanted, "index": index_key}
    if fresh != stored:
        try:
            atomic_write_bytes(runs_state_path(root), dump_bytes(fresh))
        except OSError as exc:  # a read-only tree: every page rendered next time
            logging.getLogger(__name__).warning("cannot write %s: %s",
                                                runs_state_path(root), exc)
    return written
