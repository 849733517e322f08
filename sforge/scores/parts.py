"""The tables by task: each task's share of scores.csv, best.csv and the budgets, cached by
exactly what it is made of, so one changed result redoes one task and the tables are a
concatenation.

Every table is a function of per-task pieces: scores.csv is sorted by task first, best.csv
and the budget bests hold one row per (source, task), and the leaderboard is a mean over a
sources × tasks grid. A task's part is keyed by a digest of its submissions (source, name,
archive, sidecar fields, result path), the stat of each result file (inode, size, mtime,
ctime: results are replaced atomically, so a regraded file is a new inode), its scoring
settings (direction, rescale table, category) and the budgets. A hit costs a stat per
result and no parse; the tasks that miss are computed together (one pass of the very
functions the one-table path uses, then split by task), so both paths give the same bytes
(tests check it). The cache only ever saves time, it never decides a score.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..fileio import atomic_write_bytes, atomic_write_text
from ..model import Benchmark
from ..submissions import Submission
from .cache import _cache_path, _dumps, _loads, _missing, prune_shards
from .leaderboard import _best_of, _check_budgets, _markdown, _means, _ranked, board_frame
from .ranking import best_rows, score_rows
from .tables import BEST_COLUMNS, BUDGETS_COLUMNS, SCORES_COLUMNS, _bulk, _empty, csv_lines

log = logging.getLogger(__name__)

_PARTS_VERSION = "1"


@dataclass
class TablePaths:
    """Where the tables go (Layout's names)."""
    scores: Path
    best: Path
    leaderboard: Path
    leaderboard_md: Path
    budgets: Path


def _parts_path(scores_csv: Path) -> Path:
    return scores_csv.parent / ".cache" / f"{scores_csv.name}.parts"


def _task_settings(bench: Benchmark, task_id: str) -> str:
    task = bench.tasks.get(task_id)
    if task is None:
        return "-"
    return json.dumps([task.score.direction, task.score.rescale, task.category],
                      sort_keys=True, default=str)


def _digest(head: str, records: list[tuple[Submission, Path]]) -> str:
    """What a task's part is made of; the order of `records` does not matter."""
    lines = []
    for sub, path in records:
        name = os.fspath(path)
        try:
            st = os.stat(name)
        except FileNotFoundError:
            raise _missing(name) from None
        lines.append(f"{sub.source}\0{sub.name}\0{sub.sha256}\0{sub.submitted_at}\0"
                     f"{sub.elapsed_s!r}\0{sub.agent}\0{sub.model}\0{name}\0{st.st_ino}:"
                     f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}\n")
    lines.sort()
    return hashlib.sha256("".join([head, *lines]).encode()).hexdigest()


def _split(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return dict(tuple(frame.groupby("task", sort=False))) if len(frame) else {}


def _make_parts(bench: Benchmark, records: list[tuple[Submission, Path]], hours: list[float],
                cache: Path) -> dict[str, dict[str, Any]]:
    """The parts of every task of `records`, computed together (one pass, then split)."""
    frame = score_rows(bench, records, cache, prune=False)
    tasks = frame["task"].tolist()
    lines = csv_lines(frame)
    parts: dict[str, dict[str, Any]] = {}
    for i, task_id in enumerate(tasks):  # rows are sorted by task
        part = parts.get(task_id)
        if part is None:
            part = parts[task_id] = {"lines": [], "best": {c: [] for c in BEST_COLUMNS},
                                     "budgets": [], "people": {}, "timed": set()}
        part["lines"].append(lines[i])
    for task_id, best in _split(best_rows(bench, frame)).items():
        parts[task_id]["best"] = {c: best[c].tolist() for c in BEST_COLUMNS}
    timed = frame[frame["elapsed_s"].notna()]
    for task_id, source in zip(timed["task"].tolist(), timed["source"].tolist(), strict=True):
        parts[task_id]["timed"].add(source)
    if len(timed) and hours:
        ranked = _ranked(bench, timed)
        for h in hours:
            b = _best_of(bench, ranked[ranked["elapsed_s"] <= h * 3600.0])
            for s, t, r in zip(b["source"].tolist(), b["task"].tolist(), b["rescaled"].tolist(),
                               strict=True):
                parts[t]["budgets"].append([s, h, r])
    for task_id, source, agent, model in zip(tasks, frame["source"].tolist(),
                                             frame["agent"].tolist(), frame["model"].tolist(),
                                             strict=True):
        entry = parts[task_id]["people"].setdefault(source, [[], []])
        for slot, value in ((0, agent), (1, model)):
            if isinstance(value, str) and value not in entry[slot]:
                entry[slot].append(value)
    for part in parts.values():
        part["lines"] = "".join(part["lines"])
        part["timed"] = sorted(part["timed"])
    return parts


def task_parts(bench: Benchmark, records: Sequence[tuple[Submission, Path]], scores_csv: Path,
               hours: list[float]) -> tuple[dict[str, dict[str, Any]], int]:
    """task → its part, in task order; reuses the cached parts whose digest still matches.
    → (parts, how many were computed)."""
    by_task: dict[str, list[tuple[Submission, Path]]] = {}
    for sub, path in records:
        by_task.setdefault(sub.task, []).append((sub, path))
    store = _parts_path(scores_csv)
    try:
        cached = _loads(store.read_bytes())
    except (OSError, ValueError):
        cached = None
    old = cached.get("parts") if isinstance(cached, dict) \
        and cached.get("version") == _PARTS_VERSION else None
    old = old if isinstance(old, dict) else {}
    head = json.dumps([_PARTS_VERSION, hours])
    sigs = {t: _digest(head + _task_settings(bench, t), recs) for t, recs in by_task.items()}
    stale = [t for t in sorted(by_task)
             if not (isinstance(old.get(t), dict) and old[t].get("sig") == sigs[t])]
    made = _make_parts(bench, [r for t in stale for r in by_task[t]], hours,
                       _cache_path(scores_csv)) if stale else {}
    parts = {t: {**made[t], "sig": sigs[t]} if t in made else old[t] for t in sorted(by_task)}
    if made or set(parts) != set(old):
        # orjson writes NaN as null, read back as NaN; only an infinity needs json's literal.
        finite = not any(isinstance(x, float) and math.isinf(x) for p in parts.values()
                         for c in ("score", "rescaled", "elapsed_s") for x in p["best"][c])
        try:
            atomic_write_bytes(store, _dumps({"version": _PARTS_VERSION, "parts": parts},
                                             finite))
        except OSError as exc:  # a read-only tree still aggregates, only slower
            log.warning("cannot write the table cache %s: %s", store, exc)
        prune_shards(_cache_path(scores_csv),
                     {os.path.dirname(os.fspath(recs[0][1])) for recs in by_task.values()})
    log.debug("table parts: %d of %d tasks computed", len(made), len(parts))
    return parts, len(made)


def write_tables(bench: Benchmark, records: Sequence[tuple[Submission, Path]],
                 out: TablePaths, budgets_h: Sequence[float]) -> int:
    """scores.csv, best.csv, leaderboard.csv/.md and budgets.csv in one pass over per-task
    parts: the same files write_scores, write_best and write_leaderboard make one after the
    other. → how many tasks' parts were computed (0 when nothing changed)."""
    hours = _check_budgets(budgets_h)
    with _bulk():
        parts, made = task_parts(bench, records, out.scores, hours)
        atomic_write_text(out.scores, ",".join(SCORES_COLUMNS) + "\n"
                          + "".join(p["lines"] for p in parts.values()))
        best_cols: dict[str, list[Any]] = {c: [] for c in BEST_COLUMNS}
        for p in parts.values():
            for c in BEST_COLUMNS:
                best_cols[c] += p["best"][c]
        best = pd.DataFrame({c: pd.Series(best_cols[c], dtype=t) for c, t in BEST_COLUMNS.items()})
        best = best.sort_values(["source", "task"], ignore_index=True)
        atomic_write_text(out.best, _csv(best, BEST_COLUMNS))
        people: dict[str, list[set[str]]] = {}
        timed: set[str] = set()
        for p in parts.values():
            timed.update(p["timed"])
            for source, (agents, models) in p["people"].items():
                entry = people.setdefault(source, [set(), set()])
                entry[0].update(agents)
                entry[1].update(models)
        board = board_frame(bench, best, sorted(people),
                            {s: (",".join(sorted(a)) or None, ",".join(sorted(m)) or None)
                             for s, (a, m) in people.items()})
        budgets = _budgets(bench, [[s, t, h, r] for t, p in parts.items()
                                   for s, h, r in p["budgets"]], sorted(timed), hours)
    atomic_write_text(out.leaderboard, _csv(board, None))
    atomic_write_text(out.budgets, _csv(budgets, None))
    atomic_write_text(out.leaderboard_md, _markdown(bench, board, budgets))
    return made


def _csv(frame: pd.DataFrame, columns: dict[str, str] | None) -> str:
    from .tables import csv_text

    return csv_text(frame if len(frame) or columns is None else _empty(columns))


def _budgets(bench: Benchmark, rows: list[list[Any]], timed: list[str],
             hours: list[float]) -> pd.DataFrame:
    """budgets.csv from the per-(source, task) bests within each budget (see budget_rows)."""
    sources = pd.Index(timed, name="source", dtype="str")
    if not len(sources) or not hours:
        return _empty(BUDGETS_COLUMNS)
    bests = pd.DataFrame(rows, columns=["source", "task", "budget_h", "rescaled"]).astype(
        {"source": "str", "task": "str", "budget_h": "float64", "rescaled": "float64"})
    frames = []
    for h in hours:
        means = _means(bench, bests[bests["budget_h"] == h], sources)[
            ["score", "tasks_valid"]].reset_index()
        means.insert(1, "budget_h", h)
        frames.append(means)
    return pd.concat(frames, ignore_index=True)[list(BUDGETS_COLUMNS)].astype(BUDGETS_COLUMNS)


__all__ = ["TablePaths", "task_parts", "write_tables"]
