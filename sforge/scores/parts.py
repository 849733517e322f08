"""The tables by task: each task's share of scores.csv, best.csv and the budgets, cached by
exactly what it is made of, so one changed result redoes one task and the tables are a
concatenation.

Every table is a function of per-task pieces: scores.csv is sorted by task first, best.csv
and the budget bests hold one row per (source, task), and the leaderboard is a mean over a
sources × tasks grid. A task's part is keyed by a digest of its submissions (source, name,
archive, sidecar fields, result path), the stat of each result file (inode, size, mtime,
ctime: results are replaced atomically, so a regraded file is a new inode), its scoring
settings (direction, rescale table, category) and the budgets. A hit costs a stat per
result and no parse; a miss re-reads that task's results (through the parse cache) and
computes its rows with the very functions the single-table path uses, so both paths give
the same bytes (tests check it). The cache only ever saves time, it never decides a score.
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
from .cache import _cache_path, _dumps, _loads, _missing, _sig, prune_shards
from .leaderboard import _best_of, _check_budgets, _markdown, _means, _ranked, board_frame
from .ranking import best_rows, score_rows
from .tables import BEST_COLUMNS, BUDGETS_COLUMNS, SCORES_COLUMNS, _bulk, _empty, csv_text

log = logging.getLogger(__name__)

_PARTS_VERSION = "1"
# The per-(source, task) best within each budget: what budgets.csv averages.
_BUDGET_BEST = ("source", "task", "budget_h", "rescaled")


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


def _part(bench: Benchmark, task_id: str, records: list[tuple[Submission, Path]],
          hours: list[float], cache: Path) -> dict[str, Any]:
    """One task's rows of every table (columns as JSON-able lists)."""
    frame = score_rows(bench, records, cache, prune=False)
    text = csv_text(frame)
    lines = text.split("\n", 1)[1] if len(frame) else ""
    best = best_rows(bench, frame)
    timed = frame[frame["elapsed_s"].notna()]
    budget_rows = []
    if len(timed) and task_id in bench.tasks:
        ranked = _ranked(bench, timed)
        for h in hours:
            b = _best_of(bench, ranked[ranked["elapsed_s"] <= h * 3600.0])
            budget_rows += [(s, task_id, h, r) for s, r in
                            zip(b["source"].tolist(), b["rescaled"].tolist(), strict=True)]
    people: dict[str, list[list[str]]] = {}
    for source, agent, model in zip(frame["source"].tolist(), frame["agent"].tolist(),
                                    frame["model"].tolist(), strict=True):
        entry = people.setdefault(source, [[], []])
        for slot, value in ((0, agent), (1, model)):
            if isinstance(value, str) and value not in entry[slot]:
                entry[slot].append(value)
    return {"lines": lines,
            "best": {c: best[c].tolist() for c in BEST_COLUMNS},
            "budgets": [list(r) for r in budget_rows],
            "people": people,
            "timed": sorted(set(timed["source"].tolist()))}


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
        if not isinstance(cached, dict) or cached.get("version") != _PARTS_VERSION:
            cached = {}
    except (OSError, ValueError):
        cached = {}
    old = cached.get("parts", {}) if isinstance(cached.get("parts"), dict) else {}
    head = json.dumps([_PARTS_VERSION, hours])
    parts: dict[str, dict[str, Any]] = {}
    made = 0
    for task_id in sorted(by_task):
        recs = by_task[task_id]
        digest = hashlib.sha256(head.encode())
        digest.update(_task_settings(bench, task_id).encode())
        for sub, path in sorted(recs, key=lambda r: (r[0].source, r[0].name, r[0].sha256,
                                                     str(r[1]))):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise _missing(str(path)) from None
            digest.update(repr((sub.source, sub.name, sub.sha256, sub.submitted_at,
                                sub.elapsed_s, sub.agent, sub.model, str(path),
                                _sig(st))).encode())
        sig = digest.hexdigest()
        hit = old.get(task_id)
        if isinstance(hit, dict) and hit.get("sig") == sig:
            parts[task_id] = hit
            continue
        parts[task_id] = {"sig": sig, **_part(bench, task_id, recs, hours,
                                              _cache_path(scores_csv))}
        made += 1
    if made or set(parts) != set(old):
        # orjson writes NaN as null, read back as NaN; only an infinity needs json's literal.
        finite = not any(isinstance(x, float) and math.isinf(x) for p in parts.values()
                         for c in ("score", "rescaled", "elapsed_s") for x in p["best"][c])
        try:
            atomic_write_bytes(store, _dumps({"version": _PARTS_VERSION, "parts": parts},
                                             finite))
        except OSError as exc:  # a read-only tree still aggregates, only slower
            log.warning("cannot write the table cache %s: %s", store, exc)
        prune_shards(_cache_path(scores_csv), {os.path.dirname(str(p)) for _, p in records})
    log.debug("table parts: %d of %d tasks computed", made, len(parts))
    return parts, made


def _frame(columns: dict[str, str], data: dict[str, list[Any]]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(data[c], dtype=t) for c, t in columns.items()})


def write_tables(bench: Benchmark, records: Sequence[tuple[Submission, Path]],
                 out: TablePaths, budgets_h: Sequence[float]) -> int:
    """scores.csv, best.csv, leaderboard.csv/.md and budgets.csv in one pass over per-task
    parts: the same files write_scores, write_best and write_leaderboard make one after the
    other. → how many tasks' parts were computed (0 when nothing changed)."""
    hours = _check_budgets(budgets_h)
    with _bulk():
        parts, made = task_parts(bench, records, out.scores, hours)
        header = ",".join(SCORES_COLUMNS)
        atomic_write_text(out.scores, header + "\n" + "".join(p["lines"] for p in
                                                              parts.values()))
        best_cols: dict[str, list[Any]] = {c: [] for c in BEST_COLUMNS}
        for p in parts.values():
            for c in BEST_COLUMNS:
                best_cols[c] += p["best"][c]
        best = _frame(BEST_COLUMNS, best_cols)
        best = best.sort_values(["source", "task"], ignore_index=True) if len(best) \
            else _empty(BEST_COLUMNS)
        atomic_write_text(out.best, csv_text(best))
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
        budgets = _budgets(bench, [r for p in parts.values() for r in p["budgets"]],
                           sorted(timed), hours)
    atomic_write_text(out.leaderboard, csv_text(board))
    atomic_write_text(out.budgets, csv_text(budgets))
    atomic_write_text(out.leaderboard_md, _markdown(bench, board, budgets))
    return made


def _budgets(bench: Benchmark, rows: list[list[Any]], timed: list[str],
             hours: list[float]) -> pd.DataFrame:
    """budgets.csv from the per-(source, task) bests within each budget (see budget_rows)."""
    sources = pd.Index(timed, name="source", dtype="str")
    if not len(sources) or not hours:
        return _empty(BUDGETS_COLUMNS)
    bests = pd.DataFrame(rows, columns=list(_BUDGET_BEST)).astype(
        {"source": "str", "task": "str", "budget_h": "float64", "rescaled": "float64"})
    frames = []
    for h in hours:
        means = _means(bench, bests[bests["budget_h"] == h], sources)[
            ["score", "tasks_valid"]].reset_index()
        means.insert(1, "budget_h", h)
        frames.append(means)
    return pd.concat(frames, ignore_index=True)[list(BUDGETS_COLUMNS)].astype(BUDGETS_COLUMNS)


__all__ = ["TablePaths", "task_parts", "write_tables"]
