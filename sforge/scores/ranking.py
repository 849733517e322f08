"""scores.csv (each submission joined with its result, rescaled) and best.csv (the best valid
result per source and task)."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sforge.benchmark.model import Benchmark
from sforge.benchmark.rescaling import KINDS, validate
from sforge.benchmark.submissions import RecordRow, Submission, record_rows
from sforge.core.bulk import no_gc
from sforge.core.errors import SforgeError
from sforge.scores.cache import RESULT_FIELDS, cache_path, read_results
from sforge.scores.tables import (
    BEST_COLUMNS,
    RANKING_COLUMNS,
    SCORES_COLUMNS,
    empty_table,
    read_scores,
    write_csv,
    write_sidecar,
)

log = logging.getLogger(__name__)

def _rescaler(table: Mapping[str, Any] | None) -> Callable[[float], float] | None:
    """The task's formula with its table validated once (sforge.rescale validates on
    every call: 12 µs each, over a second for 100k rows). Same formula, same numbers."""
    if table is None:
        return None
    validate(table)
    kind = KINDS[str(table["kind"])]
    params = {n: float(table[n]) for n in kind.params}  # type: ignore[arg-type]
    return lambda r: float(kind.formula(r, params))


def rescale_column(frame: pd.DataFrame, bench: Benchmark, score: str = "score",
                   valid: str | None = "valid") -> pd.Series:
    """Rescaled score of each row: the task's formula over the unique raws of that task.

    Empty (NaN) for invalid rows, non-finite raws, tasks without a rescale table and tasks not
    in the benchmark — rescale.md: no table or no raw score means no rescaled score.
    """
    raws = frame[score].to_numpy(dtype="float64", na_value=np.nan)
    ok = np.isfinite(raws)
    if valid is not None:
        ok &= frame[valid].to_numpy(dtype=bool)
    out = np.full(len(frame), np.nan)
    positions = np.flatnonzero(ok)
    tasks = frame["task"].to_numpy()[positions]
    for task_id, where in pd.Series(positions).groupby(tasks, sort=False).indices.items():
        task = bench.tasks.get(str(task_id))
        fn = _rescaler(task.score.rescale) if task is not None else None
        if fn is None:
            continue
        rows = positions[where]
        uniq, inverse = np.unique(raws[rows], return_inverse=True)
        values = np.fromiter((fn(r) for r in uniq.tolist()), dtype="float64", count=len(uniq))
        out[rows] = values[inverse]
    return pd.Series(out, index=frame.index, dtype="float64")



_SUBMISSION_FIELDS = ("source", "task", "name", "sha256", "submitted_at", "elapsed_s", "agent",
                      "model", "path")


def score_rows(bench: Benchmark, rows: Sequence[RecordRow], cache: Path | None = None,
               prune: bool = True, known: Mapping[str, tuple[Any, ...]] | None = None
               ) -> pd.DataFrame:
    """The scores.csv table: each submission joined with its eval result, rescaled.
    `known`: result fields already read (sforge.scores.cache.read_results).

    Sorted by task, source, name, archive, so the same inputs give the same bytes."""
    # Plain tuples: hashing and sorting them is far cheaper than Submission objects with Paths.
    subs = sorted(dict.fromkeys(r[:9] for r in rows), key=operator.itemgetter(1, 0, 2, 3, 8))
    results = read_results([row[8] for row in subs], cache, prune=prune, known=known)
    # Column lists straight from the tuples: no row objects, no per-column type inference.
    sub_cols = dict(zip(_SUBMISSION_FIELDS, zip(*subs, strict=True) if subs else
                        [()] * len(_SUBMISSION_FIELDS), strict=True))
    res_cols = dict(zip(RESULT_FIELDS, zip(*map(results.__getitem__, sub_cols["path"]),
                                            strict=True) if subs else
                        [()] * len(RESULT_FIELDS), strict=True))
    wrong = [i for i, (t, rt, sha, rsha) in enumerate(zip(
        sub_cols["task"], res_cols["task"], sub_cols["sha256"], res_cols["submission"],
        strict=True)) if t != rt or sha != rsha]
    if wrong:
        i = wrong[0]
        raise SforgeError(
            f"{sub_cols['path'][i]}: eval result is for task {res_cols['task'][i]!r}, archive "
            f"{res_cols['submission'][i]}, but was paired with {sub_cols['source'][i]}/"
            f"{sub_cols['task'][i]}/{sub_cols['name'][i]} (archive {sub_cols['sha256'][i]}); "
            f"{len(wrong)} such pairs")
    unknown = sorted(set(sub_cols["task"]) - set(bench.tasks))
    if unknown:
        log.warning("results for tasks not in the benchmark (not ranked): %s",
                    ", ".join(unknown[:10]))
    source = {**sub_cols, **res_cols, "task": sub_cols["task"],
              "submission": sub_cols["sha256"], "graded_at": res_cols["finished_at"]}
    frame = pd.DataFrame({c: pd.Series(source[c], dtype=t) for c, t in SCORES_COLUMNS.items()
                          if c not in ("direction", "rescaled")})
    frame["direction"] = frame["task"].map(_directions(bench)).astype("str")
    frame["rescaled"] = rescale_column(frame, bench)
    return frame[list(SCORES_COLUMNS)].astype(SCORES_COLUMNS)


def _directions(bench: Benchmark) -> pd.Series:
    return pd.Series({t.id: t.score.direction for t in bench.tasks.values()}, dtype="str")


def write_scores(benchmark: Benchmark, records: list[tuple[Submission, Path]], out: Path,
                 *, cache: bool = True) -> None:
    """scores.csv from (submission, eval result path) pairs; raises if a result is missing.

    cache=True keeps parsed results in <dir of out>/.cache/scores.csv.results/ for the next
    aggregation."""
    out = Path(out)
    with no_gc():
        table = score_rows(benchmark, record_rows(records), cache_path(out) if cache else None)
        write_csv(table, out)
        if cache:
            write_sidecar(table, out)


# --------------------------------------------------------------------------- best.csv
def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True, format="ISO8601", errors="coerce")


def ranked_rows(bench: Benchmark, scores: pd.DataFrame) -> pd.DataFrame:
    """The valid, finite results on benchmark tasks, best first within each (source, task).

    Direction comes from the benchmark as loaded now (task.toml is the source of truth).
    Ties go to the earliest: submitted_at, then elapsed_s, then graded_at (a missing time
    sorts last), then name and archive, so the choice never depends on row order. Times are
    parsed only for rows that tie on the raw score: ties are rare, 100k rows are not.
    """
    finite = np.isfinite(scores["score"].to_numpy(dtype="float64", na_value=np.nan))
    cand = scores[scores["task"].isin(list(bench.tasks)) & scores["valid"] & finite].copy()
    cand["direction"] = cand["task"].map(_directions(bench))
    # Sorting ascending by this key puts the best first in either direction.
    cand["_rank"] = np.where(cand["direction"] == "minimize", cand["score"], -cand["score"])
    tied = cand.duplicated(["source", "task", "_rank"], keep=False)
    cand["_sub"] = pd.Series(pd.NaT, index=cand.index, dtype="datetime64[ns, UTC]")
    cand["_graded"] = cand["_sub"]
    if tied.any():
        cand.loc[tied, "_sub"] = _utc(cand.loc[tied, "submitted_at"])
        cand.loc[tied, "_graded"] = _utc(cand.loc[tied, "graded_at"])
    # np.lexsort over integer codes and numbers: the order of sort_values(["source", "task",
    # "_rank", "_sub", "elapsed_s", "_graded", "name", "submission"], na_position="last",
    # kind="stable") in a fifth of the time. Times, names and archives only order rows that
    # tie on (source, task, _rank), so they are coded among those rows alone.
    last = np.iinfo("int64").max
    keys = [_codes(cand["source"]), _codes(cand["task"]), cand["_rank"].to_numpy()]
    if tied.any():
        where = tied.to_numpy()
        for col in ("_sub", "elapsed_s", "_graded", "name", "submission"):
            key = np.zeros(len(cand), dtype="float64" if col == "elapsed_s" else "int64")
            part = cand.loc[where, col]
            if col in ("_sub", "_graded"):
                nat = part.isna().to_numpy()
                values = part.to_numpy(dtype="datetime64[ns]").view("int64")
                key[where] = np.where(nat, last, values)
            elif col == "elapsed_s":
                key[where] = part.to_numpy(dtype="float64", na_value=np.nan)  # NaN sorts last
            else:
                key[where] = _codes(part)
            keys.append(key)
    return cand.iloc[np.lexsort(keys[::-1])]


def _codes(values: pd.Series) -> np.ndarray:
    """Integer codes in sorted order of the values (a missing value last)."""
    codes, uniques = pd.factorize(values, sort=True, use_na_sentinel=True)
    return np.where(codes < 0, len(uniques), codes)


def best_of_ranked(bench: Benchmark, ranked: pd.DataFrame) -> pd.DataFrame:
    """First row per (source, task) of a ranked_rows frame (or of any filter of one)."""
    best = ranked.drop_duplicates(["source", "task"], keep="first").copy()
    best["rescaled"] = rescale_column(best, bench)
    return best


def best_rows(bench: Benchmark, scores: pd.DataFrame) -> pd.DataFrame:
    """Per (source, task) of the benchmark: the best valid raw score in the task's direction
    (see ranked_rows for ties), rescaled, with the counts of submissions and valid results."""
    best = best_of_ranked(bench, ranked_rows(bench, scores))
    if best.empty:
        return empty_table(BEST_COLUMNS)
    counts = scores[scores["task"].isin(list(bench.tasks))].groupby(["source", "task"]).agg(
        submissions=("valid", "size"), valid_count=("valid", "sum"))
    categories = pd.Series({t.id: t.category for t in bench.tasks.values()}, dtype="str")
    best["category"] = best["task"].map(categories)
    best = best.join(counts, on=["source", "task"])
    return best[list(BEST_COLUMNS)].astype(BEST_COLUMNS).sort_values(["source", "task"],
                                                                     ignore_index=True)


def write_best(benchmark: Benchmark, scores_csv: Path, out: Path) -> None:
    """best.csv from scores.csv."""
    with no_gc():
        write_csv(best_rows(benchmark, read_scores(scores_csv, RANKING_COLUMNS)), Path(out))




def not_valid_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """The invalid and failed rows of scores.csv, newest first (as the report lists them)."""
    return newest_first(scores[~scores["valid"]])


def newest_first(rows: pd.DataFrame) -> pd.DataFrame:
    """Latest graded first, then by task, source and name (a row with no time last)."""
    return rows.sort_values(["graded_at", "task", "source", "name"],
                            ascending=[False, True, True, True], na_position="last",
                            kind="stable")
