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

`sforge report` and the report rule go one step further (update_tables with fingerprints):
a task whose folder fingerprint (sforge.scores.folders) is the one stored with its part is
not even listed: no archive, no result and no submission record of it is looked at, so one
changed result among 100,000 costs its task and a concatenation. The others are all
computed, so they need no digest (100,000 stats saved on a cold report). Each part also
holds what the report's index needs of the task's rows (counts, sources, the newest invalid
rows), so the index is made without reading scores.csv back.

A part's rows of scores.csv are kept as their place in the scores.csv written with the
store (tagged with that file's stat): the next scores.csv copies them from there, and a
cold report writes its 23 MB of rows once, not twice over 200 more files. A scores.csv
written by anything else, or gone, leaves every part to be computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sforge.benchmark.model import Benchmark
from sforge.benchmark.submissions import RecordRow
from sforge.core.bulk import no_gc
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_text, copy_range, create_temp, utf8
from sforge.core.forking import fork_map, usable_cores
from sforge.scores.cache import cache_path, missing_result, prune_shards, stat_sig
from sforge.scores.columns import INVALID_FIELDS, NEWEST_INVALID
from sforge.scores.leaderboard import (
    best_of_ranked,
    board_frame,
    check_budgets,
    leaderboard_markdown,
    mean_scores,
    ranked_rows,
)
from sforge.scores.ranking import best_rows, not_valid_rows, score_rows
from sforge.scores.store import (
    PARTS_VERSION,
    TablePaths,
    fresh_among,
    kept_fingerprints,
    load_store,
    save_store,
)
from sforge.scores.tables import (
    BEST_COLUMNS,
    BUDGETS_COLUMNS,
    SCORES_COLUMNS,
    csv_lines,
    csv_text,
    empty_table,
)

log = logging.getLogger(__name__)


Records = Sequence[RecordRow]


def _task_settings(bench: Benchmark, task_id: str) -> str:
    task = bench.tasks.get(task_id)
    if task is None:
        return "-"
    return json.dumps([task.score.direction, task.score.rescale, task.category],
                      sort_keys=True, default=str)


def _digest(head: str, rows: list[RecordRow]) -> str:
    """What a task's part is made of; the order of `rows` does not matter."""
    lines = []
    for sub in rows:
        name = sub.result
        try:
            st = os.stat(name)
        except FileNotFoundError:
            raise missing_result(name) from None
        lines.append(f"{sub.source}\0{sub.name}\0{sub.sha256}\0{sub.submitted_at}\0"
                     f"{sub.elapsed_s!r}\0{sub.agent}\0{sub.model}\0{name}\0{st.st_ino}:"
                     f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}\n")
    lines.sort()
    return hashlib.sha256("".join([head, *lines]).encode()).hexdigest()


def mixed_judges(sources: Iterable[str], image_ids: Iterable[Any]) -> dict[str, list[str]]:
    """source → the judge image ids its results of one task were graded under, for the
    sources with more than one (results without an id, from older sforge, say nothing)."""
    seen: dict[str, set[str]] = {}
    for source, image in zip(sources, image_ids, strict=True):
        if isinstance(image, str) and image:
            seen.setdefault(source, set()).add(image)
    return {s: sorted(ids) for s, ids in sorted(seen.items()) if len(ids) > 1}


def index_entry(rows: pd.DataFrame) -> dict[str, Any]:
    """What the report's index shows of one task's rows of scores.csv: counts, sources,
    the sources graded under more than one judge image, and its newest invalid rows (the
    index lists the newest NEWEST_INVALID of all tasks)."""
    bad = not_valid_rows(rows)
    return {"graded": len(rows), "invalid": len(bad),
            "sources": sorted(rows["source"].unique().tolist()),
            "mixed_judges": mixed_judges(rows["source"].tolist(),
                                         rows["judge_image_id"].tolist()),
            "bad": {c: bad[c].head(NEWEST_INVALID).tolist() for c in INVALID_FIELDS}}


def _spans(tasks: list[str]) -> dict[str, tuple[int, int]]:
    """task → (first row, end) in a column sorted by task."""
    cuts = [i for i in range(1, len(tasks)) if tasks[i] != tasks[i - 1]]
    starts, ends = [0, *cuts], [*cuts, len(tasks)]
    return {tasks[a]: (a, b) for a, b in zip(starts, ends, strict=True)} if tasks else {}


def _make_parts(bench: Benchmark, rows: list[RecordRow], hours: list[float], cache: Path,
                known: Mapping[str, tuple[Any, ...]] | None = None
                ) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    """The parts of every task of `records`, computed together and split by task: each table
    is made once over all rows by the very functions the one-table path uses, and its rows
    are dealt out to their tasks from plain lists (no pandas operation per task). → the
    parts and their rows of scores.csv."""
    frame = score_rows(bench, rows, cache, prune=False, known=known)
    tasks = frame["task"].tolist()
    sources = frame["source"].tolist()
    spans = _spans(tasks)
    lines = csv_lines(frame)
    parts: dict[str, dict[str, Any]] = {}
    for task_id, (a, b) in spans.items():
        parts[task_id] = {"lines": "".join(lines[a:b]), "best": {c: [] for c in BEST_COLUMNS},
                          "budgets": [], "people": {}, "timed": [],
                          "index": {"graded": b - a, "invalid": 0, "sources": set(),
                                    "bad": {c: [] for c in INVALID_FIELDS}}}
    best = best_rows(bench, frame)
    best_cols = {c: best[c].tolist() for c in BEST_COLUMNS}
    for i, task_id in enumerate(best_cols["task"]):  # in best.csv's order within each task
        into = parts[task_id]["best"]
        for c, values in best_cols.items():
            into[c].append(values[i])
    timed = ~np.isnan(frame["elapsed_s"].to_numpy(dtype="float64", na_value=np.nan))
    for task_id, source in set(zip(compress(tasks, timed), compress(sources, timed), strict=True)):
        parts[task_id]["timed"].append(source)
    if timed.any() and hours:
        ranked = ranked_rows(bench, frame[timed])
        for h in hours:
            b = best_of_ranked(bench, ranked[ranked["elapsed_s"] <= h * 3600.0])
            for s, t, r in zip(b["source"].tolist(), b["task"].tolist(), b["rescaled"].tolist(),
                               strict=True):
                parts[t]["budgets"].append([s, h, r])
    # Each (task, source, agent, model) once, in order of first appearance: the lists keep
    # the order in which a row first shows each agent and model.
    for task_id, source, agent, model in dict.fromkeys(zip(
            tasks, sources, frame["agent"].tolist(), frame["model"].tolist(), strict=True)):
        entry = parts[task_id]["people"].setdefault(source, [[], []])
        for slot, value in ((0, agent), (1, model)):
            if isinstance(value, str) and value not in entry[slot]:
                entry[slot].append(value)
    # The index: newest_first over all rows keeps, within one task, the order it gives that
    # task's rows alone (the task is one of its keys, and it is stable).
    for task_id, source in set(zip(tasks, sources, strict=True)):
        parts[task_id]["index"]["sources"].add(source)
    bad = not_valid_rows(frame)
    bad_cols = {c: bad[c].tolist() for c in INVALID_FIELDS}
    for i, task_id in enumerate(bad_cols["task"]):
        index = parts[task_id]["index"]
        index["invalid"] += 1
        if index["invalid"] <= NEWEST_INVALID:
            for c, values in bad_cols.items():
                index["bad"][c].append(values[i])
    by_task: dict[str, tuple[list[str], list[Any]]] = {}
    for task_id, source, image in zip(tasks, sources, frame["judge_image_id"].tolist(),
                                      strict=True):
        pair = by_task.setdefault(task_id, ([], []))
        pair[0].append(source)
        pair[1].append(image)
    for task_id, (srcs, images) in by_task.items():
        parts[task_id]["index"]["mixed_judges"] = mixed_judges(srcs, images)
    for part in parts.values():
        part["timed"].sort()
        part["index"]["sources"] = sorted(part["index"]["sources"])
    return parts, frame


TASKS_PER_PROCESS = 20  # fewer tasks to compute than this per core: computed here


def _parts_of(bench: Benchmark, tasks: list[str], by_task: dict[str, list[RecordRow]],
              hours: list[float], cache: Path, known: Mapping[str, tuple[Any, ...]] | None
              ) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    """_make_parts of `tasks` (sorted), in worker processes by runs of tasks when there are
    many (a cold report: 200 tasks' tables were 2.3 s on one core while the other idled).
    A task's part and rows depend on its rows alone, so runs of tasks computed apart and
    put back in order are the very parts and rows of one pass."""
    n = usable_cores()
    if len(tasks) < 2 * TASKS_PER_PROCESS or n < 2:
        return _make_parts(bench, [r for t in tasks for r in by_task[t]], hours, cache, known)
    runs = 2 * n  # a few runs per core: one slow run does not keep the others waiting
    cuts = [len(tasks) * i // runs for i in range(runs + 1)]
    chunks = [tasks[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    done = fork_map(lambda run: _make_parts(bench, [r for t in run for r in by_task[t]],
                                            hours, cache, known), chunks, 1)
    parts = {t: p for made, _ in done for t, p in made.items()}
    return parts, pd.concat([frame for _, frame in done], ignore_index=True)


@dataclass
class PartsUpdate:
    """What task_parts found: every task's part, which were computed anew and their rows."""

    parts: dict[str, dict[str, Any]]  # task → part, in task order
    made: list[str]  # tasks computed anew
    frame: pd.DataFrame | None = None  # their rows of scores.csv (None when none made)
    fingerprints: dict[str, str | None] = field(default_factory=dict)
    changed: bool = False  # whether any table can differ from the last one written
    # For saving the store: the fingerprints to keep, those it holds, and the stat of the
    # scores.csv its parts' rows are in.
    keep_fps: dict[str, str] = field(default_factory=dict)
    old_fps: dict[str, Any] = field(default_factory=dict)
    csv: str | None = None


def task_parts(bench: Benchmark, records: Records, scores_csv: Path, hours: list[float], *,
               fingerprints: dict[str, str | None] | None = None,
               records_of: Callable[[list[str]], Records] | None = None,
               fingerprints_of: Callable[[list[str]], dict[str, str | None]] | None = None,
               known: Mapping[str, tuple[Any, ...]] | None = None) -> PartsUpdate:
    """task → its part, in task order; reuses the cached parts whose digest still matches.

    With `fingerprints` (task → folder fingerprint, for every task of the benchmark), a task
    whose fingerprint is the stored one keeps its part untouched and `records_of(tasks)` is
    asked only for the records of the others (`records` is then not used); those are all
    computed (their pages want their rows anyway), so no digest is taken. A task without a
    fingerprint (a folder changed too recently when they were taken) is fingerprinted again
    by `fingerprints_of` just before its records are listed: the grading or the copy that
    had just touched it may be seconds old by now, and a fingerprint taken before the
    listing is as good as one taken at the start; without that the next report would redo
    it (after a cold report right after grading: every task)."""
    old, old_fps, csv = load_store(scores_csv)
    fresh: set[str] = set()
    sigs: dict[str, str | None] = {}
    if fingerprints is not None:
        racy = [t for t, fp in fingerprints.items() if fp is None]
        if racy and fingerprints_of is not None:
            fingerprints = {**fingerprints, **fingerprints_of(racy)}
        fresh = fresh_among(old, old_fps, fingerprints)
        asked = [t for t in fingerprints if t not in fresh]
        records = records_of(asked) if records_of is not None and asked else []
    by_task: dict[str, list[RecordRow]] = {}
    for row in records:
        by_task.setdefault(row.task, []).append(row)
    if fingerprints is None:
        head = json.dumps([PARTS_VERSION, hours])
        sigs = {t: _digest(head + _task_settings(bench, t), recs) for t, recs in by_task.items()}
    stale = [t for t in sorted(by_task) if fingerprints is not None
             or not (isinstance(old.get(t), dict) and old[t].get("sig") == sigs[t])]
    made, frame = _parts_of(bench, stale, by_task, hours, cache_path(scores_csv), known) \
        if stale else ({}, None)
    tasks = sorted(set(by_task) | {t for t in fresh if t in old})
    parts = {t: {**made[t], "sig": sigs.get(t),
                 "dirs": sorted({os.path.dirname(r.result) for r in by_task[t]})}
             if t in made else old[t] for t in tasks}
    new_fps = kept_fingerprints(fingerprints, parts) if fingerprints is not None else {}
    changed = bool(made) or list(parts) != list(old)
    if made or set(parts) != set(old):
        prune_shards(cache_path(scores_csv), {d for p in parts.values() for d in p["dirs"]})
    log.debug("table parts: %d of %d tasks computed", len(made), len(parts))
    return PartsUpdate(parts, sorted(made), frame, fingerprints or {}, changed, new_fps, old_fps,
                       csv)


def update_tables(bench: Benchmark, out: TablePaths, budgets_h: Sequence[float],
                  fingerprints: dict[str, str | None] | None,
                  records_of: Callable[[list[str] | None], Records],
                  fingerprints_of: Callable[[list[str]], dict[str, str | None]] | None = None,
                  known: Mapping[str, tuple[Any, ...]] | None = None) -> PartsUpdate:
    """scores.csv, best.csv, leaderboard.csv/.md and budgets.csv in one pass over per-task
    parts: the same files write_scores, write_best and write_leaderboard make one after the
    other. Only the tasks whose folder fingerprint changed are computed (see task_parts);
    without `fingerprints`, every record is listed (`records_of(None)`), a task is computed
    when the digest of its records changed and the tables are written from the parts.
    With them, nothing is written when no table can have changed. `known`: result fields
    read moments ago (sforge.scores.cache.read_results).
    → the parts, and which tasks were computed (none when nothing changed)."""
    hours = check_budgets(budgets_h)
    with no_gc():
        listed = records_of(None) if fingerprints is None else []
        update = task_parts(bench, listed, out.scores, hours, fingerprints=fingerprints,
                            records_of=records_of, fingerprints_of=fingerprints_of,
                            known=known)
        # Keyed by digest, the parts know nothing of the benchmark's own settings (the
        # statuses left out of the leaderboard): the tables are made from them every time.
        if fingerprints is None or update.changed or not all(p.exists() for p in out.every()):
            update.changed = True
            parts, csv = _write(bench, update, out, hours)
            save_store(out.scores, parts, csv, update.keep_fps)
        elif update.keep_fps != update.old_fps:
            save_store(out.scores, update.parts, update.csv, update.keep_fps)
    return update


def _write_scores(scores_csv: Path, update: PartsUpdate) -> tuple[dict[str, Any], str]:
    """scores.csv: the header, then each part's rows (those computed now, or those of the
    scores.csv being replaced, copied by the kernel: after one change, 23 MB of 100,000
    rows need not pass through Python). → the parts, each with the place of its rows in
    the new file, and that file's stat (fstat after the rename: what was written, so a file
    put there by anything else later does not match)."""
    with contextlib.ExitStack() as stack:
        old = -1
        if any("lines" not in p for p in update.parts.values()):
            old = os.open(scores_csv, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            stack.callback(os.close, old)
            if stat_sig(os.fstat(old)) != update.csv:
                raise SforgeError(f"{scores_csv} changed while the tables were made; "
                                  "run again")
        header = (",".join(SCORES_COLUMNS) + "\n").encode()
        pieces: list[bytes | list[int]] = [header]  # bytes, or [start, size] of the old file
        at = len(header)
        placed: dict[str, Any] = {}
        for t, p in update.parts.items():
            if "lines" in p:
                rows = utf8(p["lines"])
                size = len(rows)
                pieces.append(rows)
            else:
                start, size = p["at"]
                last = pieces[-1]
                if isinstance(last, list) and last[0] + last[1] == start:
                    last[1] += size  # the next rows of the old file: one copy
                else:
                    pieces.append([start, size])
            placed[t] = {**{k: v for k, v in p.items() if k != "lines"}, "at": [at, size]}
            at += size
        scores_csv.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_temp(scores_csv.parent, prefix=f".{scores_csv.name}.")
        try:
            with os.fdopen(fd, "wb") as fh:
                for piece in pieces:
                    if isinstance(piece, bytes):
                        fh.write(piece)
                    else:
                        fh.flush()
                        copy_range(old, fh.fileno(), *piece)
                fh.flush()
                os.replace(tmp, scores_csv)
                return placed, stat_sig(os.fstat(fh.fileno()))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _write(bench: Benchmark, update: PartsUpdate, out: TablePaths,
           hours: list[float]) -> tuple[dict[str, Any], str]:
    """The five tables from the parts. → the parts as stored and the stat of scores.csv
    (see _write_scores)."""
    placed, csv = _write_scores(out.scores, update)
    parts = update.parts
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
    atomic_write_text(out.leaderboard_md, leaderboard_markdown(bench, board, budgets))
    return placed, csv


def _csv(frame: pd.DataFrame, columns: dict[str, str] | None) -> str:
    return csv_text(frame if len(frame) or columns is None else empty_table(columns))


def _budgets(bench: Benchmark, rows: list[list[Any]], timed: list[str],
             hours: list[float]) -> pd.DataFrame:
    """budgets.csv from the per-(source, task) bests within each budget (see budget_rows)."""
    sources = pd.Index(timed, name="source", dtype="str")
    if not len(sources) or not hours:
        return empty_table(BUDGETS_COLUMNS)
    bests = pd.DataFrame(rows, columns=["source", "task", "budget_h", "rescaled"]).astype(
        {"source": "str", "task": "str", "budget_h": "float64", "rescaled": "float64"})
    frames = []
    for h in hours:
        means = mean_scores(bench, bests[bests["budget_h"] == h], sources,
                            categories=False)[["score", "tasks_valid"]].reset_index()
        means.insert(1, "budget_h", h)
        frames.append(means)
    return pd.concat(frames, ignore_index=True)[list(BUDGETS_COLUMNS)].astype(BUDGETS_COLUMNS)


__all__ = ["INVALID_FIELDS", "NEWEST_INVALID", "PartsUpdate", "TablePaths", "index_entry",
           "task_parts", "update_tables"]
