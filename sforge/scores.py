"""Eval results → scores.csv → best.csv → leaderboard (CSV, Markdown) and time budgets.

Every table is derived with pandas from the one before it, so each Snakemake rule reads
files and writes one product. The rules are, in the terms of ARCHITECTURE.md "Scores":

- scores.csv: one row per graded submission (several submissions may share one result file:
  identical archives are graded once). `rescaled` is the 0–100 score of spec/rescale.md;
  it is empty for invalid results and for tasks without a rescale table (never 0).
- best.csv: per (source, task), the best valid raw score in the task's direction; ties go
  to the earliest submission (submitted_at, then elapsed_s, then graded_at). Invalid
  results never win, whatever their raw score. Direction and rescale tables come from the
  benchmark as loaded (task.toml), not from scores.csv. As the spec ranks raw scores, a
  best raw score that a guard maps to 0 (compression_ratio_cropped_guarded below 0.05,
  the min kinds at r ≤ 0) stays the best, even over a valid result that rescales higher.
- leaderboard: per source, the mean rescaled best over EVERY task of the benchmark. A task
  without a valid result counts 0, and so does a best result without a rescaled score (a
  task with no rescale table): the mean is over the same denominator for every source.
  Also one column per task category and the count of tasks with a valid result.
- budgets.csv: the same mean, computed only from submissions made within each time budget
  (elapsed_s ≤ hours·3600), for the sources whose submissions carry elapsed times.

Reading 100,000 result files costs seconds (JSON parsing holds the GIL, so threads do not
help on this machine; they made it 2–3× slower); parsed results are therefore cached next to
scores.csv, keyed by path and (inode, size, mtime, ctime), so re-aggregation only parses the
files that changed. Result files and caches are parsed with orjson (json as the fallback for
what only Python's json reads). write_scores also leaves the ranking columns of scores.csv as
a JSON sidecar in .cache/, tagged with the CSV's stat, so best.csv and the leaderboard do not
parse the CSV again; a CSV changed by anything else is parsed as before.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import math
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from .errors import SforgeError
from .fileio import atomic_write_bytes, atomic_write_text
from .model import Benchmark
from .rescale import KINDS, validate
from .submissions import Submission

log = logging.getLogger(__name__)

DEFAULT_BUDGETS_H: tuple[float, ...] = (2, 4, 6, 8, 10, 12)

# Column → dtype of each table; the files are written and read back through these, so a
# task id like "0012" stays a string and an empty field is the only missing value.
SCORES_COLUMNS: dict[str, str] = {
    "task": "str",
    "source": "str",
    "name": "str",
    "submission": "str",  # archive sha256
    "key": "str",  # eval key: the result file is evals/<task>/<key>.json
    "valid": "bool",
    "score": "float64",  # raw
    "rescaled": "float64",  # 0–100; empty when invalid or no rescale table
    "direction": "str",
    "summary": "str",
    "reason": "str",
    "judge_image": "str",
    "graded_at": "str",  # the result's finished_at
    "duration_s": "float64",
    "submitted_at": "str",
    "elapsed_s": "float64",
    "agent": "str",
    "model": "str",
}

BEST_COLUMNS: dict[str, str] = {
    "source": "str",
    "task": "str",
    "category": "str",
    "direction": "str",
    "score": "float64",
    "rescaled": "float64",
    "submission": "str",
    "name": "str",
    "key": "str",
    "submitted_at": "str",
    "elapsed_s": "float64",
    "graded_at": "str",
    "agent": "str",
    "model": "str",
    "valid_count": "int64",  # valid results of this source on this task
    "submissions": "int64",  # graded submissions of this source on this task
}

# Leaderboard columns around the per-category ones (inserted after "score").
LEADERBOARD_HEAD: dict[str, str] = {
    "rank": "int64",
    "source": "str",
    "agent": "str",
    "model": "str",
    "score": "float64",
}
LEADERBOARD_TAIL: dict[str, str] = {"tasks_valid": "int64", "tasks": "int64"}

BUDGETS_COLUMNS: dict[str, str] = {
    "source": "str",
    "budget_h": "float64",
    "score": "float64",
    "tasks_valid": "int64",
}

# Fields taken from each eval result JSON (sforge.results.EvalResult).
_RESULT_FIELDS = ("task", "submission", "key", "valid", "score", "summary", "reason",
                  "duration_s", "finished_at", "judge_image")
_CACHE_VERSION = "2"
# Positions of the float fields in a cache entry ([signature, *fields]).
_SCORE_AT = 1 + _RESULT_FIELDS.index("score")
_DURATION_AT = 1 + _RESULT_FIELDS.index("duration_s")


# --------------------------------------------------------------------------- CSV helpers
def _empty(columns: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def read_table(path: Path, columns: Mapping[str, str] | None = None,
               usecols: Sequence[str] | None = None) -> pd.DataFrame:
    """Read one of our CSVs with its schema: only an empty field is missing (a summary "NA"
    stays text) and ids stay strings. Columns not in the schema are read as floats.
    `usecols` reads only those columns (half the time for scores.csv without its texts)."""
    header = pd.read_csv(path, nrows=0).columns
    wanted = [c for c in header if usecols is None or c in usecols]
    missing = sorted(set(usecols or ()) - set(header))
    if missing:
        raise SforgeError(f"{path}: no column {missing[0]!r} (written by another version? "
                          "aggregate again)")
    dtypes = {c: (columns or {}).get(c, "float64") for c in wanted}
    bools = [c for c, t in dtypes.items() if t == "bool"]
    ints = [c for c, t in dtypes.items() if t == "int64"]
    df = pd.read_csv(
        path,
        usecols=wanted,
        dtype={c: ("str" if t in ("str", "bool") else "float64") for c, t in dtypes.items()},
        keep_default_na=False,
        na_values=[""],
    )[wanted]
    for c in bools:
        df[c] = df[c].map({"True": True, "False": False, "true": True, "false": False})
        if df[c].isna().any():
            raise SforgeError(f"{path}: column {c!r} holds a value that is not True/False")
        df[c] = df[c].astype(bool)
    for c in ints:
        df[c] = df[c].fillna(0).astype("int64")
    return df


_NEEDS_QUOTES = ('"', ",", "\n", "\r")


def _csv_field_strings(col: pd.Series) -> list[str]:
    """One column as CSV fields, as pandas' to_csv writes them (QUOTE_MINIMAL, empty NaN)."""
    if col.dtype == "float64":
        values = col.to_numpy()
        out = [repr(v) for v in values.tolist()]
        for i in np.flatnonzero(np.isnan(values)).tolist():
            out[i] = ""
        return out
    if col.dtype == bool:
        return ["True" if v else "False" for v in col.tolist()]
    if col.dtype == "int64":
        return [str(v) for v in col.tolist()]
    out = col.astype("str").fillna("").tolist()
    whole = "".join(out)  # one scan in C; most columns hold nothing to quote
    if any(ch in whole for ch in _NEEDS_QUOTES):
        for i, v in enumerate(out):
            if '"' in v or "," in v or "\n" in v or "\r" in v:
                out[i] = '"' + v.replace('"', '""') + '"'
    return out


def csv_text(df: pd.DataFrame) -> str:
    """df.to_csv(index=False) in 60% of the time: a column at a time, then one join per row
    (2.2 s → 1.3 s for 100k scores rows). Byte-identical to pandas for our column types
    (tests/test_scores.py checks it) but for one fix: a field holding a carriage return is
    quoted, where pandas leaves it bare and its own reader then splits the row in two (a
    grader's summary may well hold one). Any other table goes to pandas."""
    simple = all(str(t) in ("float64", "bool", "int64", "str") for t in df.dtypes)
    if not simple or len(df.columns) < 2 or not len(df):
        return df.to_csv(index=False, lineterminator="\n")
    header = ",".join(_csv_field_strings(pd.Series(list(df.columns), dtype="str")))
    columns = [_csv_field_strings(df[c]) for c in df.columns]
    return header + "\n" + "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write_text(Path(path), csv_text(df))


@contextlib.contextmanager
def _bulk() -> Iterator[None]:
    """No cyclic GC while 100k rows of acyclic lists and tuples are built: the collector
    would rescan the growing heap again and again (0.6–0.9 s of 5 s measured)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_scores(path: Path, usecols: Sequence[str] | None = None) -> pd.DataFrame:
    """scores.csv as read_table reads it; the ranking columns come from the sidecar that
    write_scores leaves beside it when that still describes this very file (5× faster)."""
    if usecols is not None and set(usecols) <= set(RANKING_COLUMNS):
        frame = _read_sidecar(Path(path), usecols)
        if frame is not None:
            return frame
    return read_table(path, SCORES_COLUMNS, usecols)


# The sidecar: the RANKING_COLUMNS of scores.csv as JSON columns, tagged with the stat of the
# CSV written with it. A CSV rewritten by anything else no longer matches and is parsed.
_SIDECAR_VERSION = "1"


def _sidecar_path(csv: Path) -> Path:
    return csv.parent / ".cache" / f"{csv.name}.columns"


def _file_sig(path: Path) -> str:
    return _sig(os.stat(path))


def _write_sidecar(table: pd.DataFrame, csv: Path) -> None:
    columns = {c: table[c].tolist() for c in RANKING_COLUMNS}  # NaN → null → NaN again
    finite = not any(np.isinf(table[c].to_numpy()).any() for c in RANKING_COLUMNS
                     if SCORES_COLUMNS[c] == "float64")
    try:
        blob = _dumps({"version": _SIDECAR_VERSION, "csv": _file_sig(csv), "rows": len(table),
                       "columns": columns}, finite)
        atomic_write_bytes(_sidecar_path(csv), blob)
    except OSError as exc:  # no sidecar: the readers parse the CSV
        log.warning("cannot write %s: %s", _sidecar_path(csv), exc)


def _read_sidecar(csv: Path, usecols: Sequence[str]) -> pd.DataFrame | None:
    try:
        sig = _file_sig(csv)
        data = _loads(_sidecar_path(csv).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != _SIDECAR_VERSION \
            or data.get("csv") != sig or not isinstance(data.get("columns"), dict):
        return None
    columns, rows = data["columns"], data.get("rows")
    wanted = [c for c in SCORES_COLUMNS if c in usecols]
    if any(not isinstance(columns.get(c), list) or len(columns[c]) != rows for c in wanted):
        return None
    return pd.DataFrame({c: pd.Series(columns[c], dtype=SCORES_COLUMNS[c]) for c in wanted},
                        index=pd.RangeIndex(rows))


# What best.csv and the budgets need of scores.csv: not the long texts (summary, reason,
# judge_image), nor what the benchmark decides anew (direction, rescaled).
RANKING_COLUMNS = ("task", "source", "name", "submission", "key", "valid", "score",
                   "graded_at", "submitted_at", "elapsed_s", "agent", "model")


def read_best(path: Path) -> pd.DataFrame:
    return read_table(path, BEST_COLUMNS)


def read_budgets(path: Path) -> pd.DataFrame:
    return read_table(path, BUDGETS_COLUMNS)


def read_leaderboard(path: Path) -> pd.DataFrame:
    return read_table(path, {**LEADERBOARD_HEAD, **LEADERBOARD_TAIL})


# --------------------------------------------------------------------------- rescale
def _rescaler(table: Mapping[str, Any] | None) -> Callable[[float], float] | None:
    """The task's formula with its table validated once (sforge.rescale.rescale validates on
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


# --------------------------------------------------------------------------- result files
def _loads(blob: bytes | str) -> Any:
    """orjson (3× faster than json for our files); json for what orjson refuses and Python's
    json accepts (NaN and Infinity literals, integers beyond 64 bits), so a file reads the same
    either way."""
    try:
        return orjson.loads(blob)
    except orjson.JSONDecodeError:
        return json.loads(blob)


def _dumps(data: Any, finite: bool = True) -> bytes:
    """orjson, unless the caller knows of a float that is not finite (orjson would write
    null) or a string is not UTF-8 (a lone surrogate): then json, which _loads reads back."""
    if finite:
        with contextlib.suppress(TypeError):
            return orjson.dumps(data)
    return json.dumps(data, separators=(",", ":")).encode()


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _missing(path: str) -> SforgeError:
    return SforgeError(f"{path}: eval result missing (grade it before aggregating)")


def _sig(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _parse_result(path: str) -> tuple[str, tuple[Any, ...]]:
    """(signature, fields) of one eval result; SforgeError naming the file when it is broken.

    os.open/fstat/read rather than open(): a third of the cost for 100k small files, and the
    signature is that of the very bytes parsed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise _missing(path) from None
    except OSError as exc:
        raise SforgeError(f"{path}: unreadable eval result: {exc}") from None
    try:
        st = os.fstat(fd)
        blob = os.read(fd, st.st_size + 1)
        if len(blob) > st.st_size:  # grew since fstat (never for an atomic write): read on
            chunks = [blob]
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            blob = b"".join(chunks)
        data = _loads(blob)
    except (OSError, ValueError) as exc:
        raise SforgeError(f"{path}: unreadable eval result: {exc}") from None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or not isinstance(data.get("valid"), bool) \
            or not isinstance(data.get("task"), str) or not isinstance(data.get("submission"), str):
        raise SforgeError(f"{path}: not an eval result (needs task, submission and a "
                          "boolean valid)")
    raw = data.get("score")
    # A bool is an int to Python, but never a score; non-numbers count as no score.
    score = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    duration = data.get("duration_s")
    duration = float(duration) if isinstance(duration, int | float) else None
    return _sig(st), (data["task"], data["submission"], data.get("key") or Path(path).stem,
                      data["valid"], score, data.get("summary"), data.get("reason"), duration,
                      data.get("finished_at") or None, data.get("judge_image") or None)


def _cache_path(out: Path) -> Path:
    # <results>/<bench>/.cache/ when out is <results>/<bench>/scores.csv (layout.cache).
    return out.parent / ".cache" / f"{out.name}.results"


def _shard_path(cache: Path, directory: str) -> Path:
    return cache / f"{hashlib.sha256(directory.encode()).hexdigest()[:24]}.json"


def _load_shard(path: Path, directory: str) -> dict[str, list[Any]]:
    try:
        data = _loads(path.read_bytes())
    except (OSError, ValueError):
        return {}  # no cache yet, or a broken one: parse everything
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION \
            or data.get("fields") != list(_RESULT_FIELDS) or data.get("dir") != directory \
            or not isinstance(data.get("results"), dict):
        return {}
    return data["results"]


def _cached_entry(entry: Any, path: str) -> list[Any] | None:
    """The cached entry if the file is still the one it was parsed from."""
    if not (isinstance(entry, list) and len(entry) == len(_RESULT_FIELDS) + 1):
        return None
    try:
        return entry if entry[0] == _sig(os.stat(path)) else None
    except FileNotFoundError:
        raise _missing(path) from None


def read_results(paths: Iterable[str], cache: Path | None = None) -> dict[str, tuple[Any, ...]]:
    """path → the result fields scores.csv needs (_RESULT_FIELDS), for each distinct path.

    With `cache` (a directory), a file whose (inode, size, mtime, ctime) matches the cached
    signature is not parsed again. Results are written atomically (a new inode), so a regraded
    file always shows a new signature; the cache only ever saves time, it never decides a
    score. One cache file per result directory (evals/<task>/): a changed result rewrites a
    few hundred entries, not all 100,000 (0.8 s of JSON).
    """
    by_dir: dict[str, list[str]] = {}
    for path in dict.fromkeys(paths):
        by_dir.setdefault(os.path.dirname(path), []).append(path)
    out: dict[str, tuple[Any, ...]] = {}
    shards: set[str] = set()
    parsed = 0
    for directory, members in by_dir.items():  # an I/O loop: a stat per file, a parse per change
        shard = _shard_path(cache, directory) if cache is not None else None
        cached = _load_shard(shard, directory) if shard is not None else {}
        fresh: dict[str, list[Any]] = {}
        for path in members:
            name = os.path.basename(path)
            entry = _cached_entry(cached.get(name), path)
            if entry is None:
                sig, fields = _parse_result(path)
                entry = [sig, *fields]
                parsed += 1
            fresh[name] = entry
            out[path] = tuple(entry[1:])
        if shard is None:
            continue
        shards.add(shard.name)
        if fresh != cached:
            finite = all(_finite(e[_SCORE_AT]) and _finite(e[_DURATION_AT])
                         for e in fresh.values())
            blob = _dumps({"version": _CACHE_VERSION, "fields": list(_RESULT_FIELDS),
                           "dir": directory, "results": fresh}, finite)
            try:
                atomic_write_bytes(shard, blob)
            except OSError as exc:  # a read-only results tree still aggregates, only slower
                log.warning("cannot write the result cache %s: %s", shard, exc)
    if cache is not None and cache.is_dir():
        for old in cache.glob("*.json"):  # directories no longer aggregated
            if old.name not in shards:
                old.unlink(missing_ok=True)
    log.debug("eval results: %d read, %d parsed", len(out), parsed)
    return out


# --------------------------------------------------------------------------- scores.csv
_SUBMISSION_FIELDS = ("source", "task", "name", "sha256", "submitted_at", "elapsed_s", "agent",
                      "model", "path")


def score_rows(bench: Benchmark, records: Sequence[tuple[Submission, Path]],
               cache: Path | None = None) -> pd.DataFrame:
    """The scores.csv table: each submission joined with its eval result, rescaled.

    Sorted by task, source, name, archive, so the same inputs give the same bytes."""
    # Plain tuples: hashing and sorting them is far cheaper than Submission objects with Paths.
    subs = sorted(dict.fromkeys(
        (s.source, s.task, s.name, s.sha256, s.submitted_at, s.elapsed_s, s.agent, s.model, str(p))
        for s, p in records), key=operator.itemgetter(1, 0, 2, 3, 8))
    results = read_results([row[8] for row in subs], cache)
    # Column lists straight from the tuples: no row objects, no per-column type inference.
    sub_cols = dict(zip(_SUBMISSION_FIELDS, zip(*subs, strict=True) if subs else
                        [()] * len(_SUBMISSION_FIELDS), strict=True))
    res_cols = dict(zip(_RESULT_FIELDS, zip(*map(results.__getitem__, sub_cols["path"]),
                                            strict=True) if subs else
                        [()] * len(_RESULT_FIELDS), strict=True))
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
    with _bulk():
        table = score_rows(benchmark, records, _cache_path(out) if cache else None)
        _write_csv(table, out)
        if cache:
            _write_sidecar(table, out)


# --------------------------------------------------------------------------- best.csv
def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True, format="ISO8601", errors="coerce")


def _ranked(bench: Benchmark, scores: pd.DataFrame) -> pd.DataFrame:
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


def _best_of(bench: Benchmark, ranked: pd.DataFrame) -> pd.DataFrame:
    """First row per (source, task) of a _ranked frame (or of any filter of one)."""
    best = ranked.drop_duplicates(["source", "task"], keep="first").copy()
    best["rescaled"] = rescale_column(best, bench)
    return best


def best_rows(bench: Benchmark, scores: pd.DataFrame) -> pd.DataFrame:
    """Per (source, task) of the benchmark: the best valid raw score in the task's direction
    (see _ranked for ties), rescaled, with the counts of submissions and valid results."""
    best = _best_of(bench, _ranked(bench, scores))
    if best.empty:
        return _empty(BEST_COLUMNS)
    counts = scores[scores["task"].isin(list(bench.tasks))].groupby(["source", "task"]).agg(
        submissions=("valid", "size"), valid_count=("valid", "sum"))
    categories = pd.Series({t.id: t.category for t in bench.tasks.values()}, dtype="str")
    best["category"] = best["task"].map(categories)
    best = best.join(counts, on=["source", "task"])
    return best[list(BEST_COLUMNS)].astype(BEST_COLUMNS).sort_values(["source", "task"],
                                                                     ignore_index=True)


def write_best(benchmark: Benchmark, scores_csv: Path, out: Path) -> None:
    """best.csv from scores.csv."""
    with _bulk():
        _write_csv(best_rows(benchmark, read_scores(scores_csv, RANKING_COLUMNS)), Path(out))


# --------------------------------------------------------------------------- leaderboard
def category_columns(bench: Benchmark) -> dict[str, str]:
    """Category → its leaderboard column. Plain category names, unless one collides with a
    fixed column (a category called "score"), which becomes "category:score"."""
    cats = sorted({t.category for t in bench.tasks.values() if t.category is not None})
    if cats and any(t.category is None for t in bench.tasks.values()):
        cats.append("uncategorized")
    fixed = set(LEADERBOARD_HEAD) | set(LEADERBOARD_TAIL)
    return {c: (f"category:{c}" if c in fixed else c) for c in cats}


def _task_categories(bench: Benchmark) -> pd.Series:
    if not category_columns(bench):
        return pd.Series(dtype="str")
    return pd.Series({t.id: t.category or "uncategorized" for t in bench.tasks.values()},
                     dtype="str")


def _grid(bench: Benchmark, best: pd.DataFrame, sources: pd.Index) -> pd.DataFrame:
    """sources × every benchmark task → rescaled best, 0 where none (see module doc)."""
    grid = best.pivot_table(index="source", columns="task", values="rescaled", aggfunc="first",
                            dropna=False)
    return grid.reindex(index=sources, columns=list(bench.tasks)).astype("float64").fillna(0.0)


def _means(bench: Benchmark, best: pd.DataFrame, sources: pd.Index) -> pd.DataFrame:
    """Per source: overall mean, per-category means and tasks with a valid result."""
    grid = _grid(bench, best, sources)
    out = pd.DataFrame(index=sources)
    out["score"] = grid.mean(axis=1) if len(bench.tasks) else np.nan
    cats = _task_categories(bench)
    if len(cats):
        per_cat = grid.T.groupby(cats.reindex(grid.columns).to_numpy()).mean().T
        names = category_columns(bench)
        out[[names[c] for c in per_cat.columns]] = per_cat.to_numpy()
    valid = best[best["task"].isin(list(bench.tasks))].groupby("source")["task"].nunique()
    out["tasks_valid"] = valid.reindex(sources).fillna(0).astype("int64")
    out["tasks"] = len(bench.tasks)
    return out


def _joined_unique(values: pd.Series) -> str | None:
    uniq = sorted(set(values.dropna()))
    return ",".join(uniq) if uniq else None


def leaderboard_rows(bench: Benchmark, best: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per source that has graded submissions, best mean first."""
    sources = pd.Index(sorted(scores["source"].unique()), name="source", dtype="str")
    cats = list(category_columns(bench).values())
    columns = {**LEADERBOARD_HEAD, **dict.fromkeys(cats, "float64"), **LEADERBOARD_TAIL}
    if not len(sources):
        return _empty(columns)
    board = _means(bench, best, sources)
    people = scores.groupby("source").agg(agent=("agent", _joined_unique),
                                          model=("model", _joined_unique))
    board = board.join(people).reset_index()
    board = board.sort_values(["score", "source"], ascending=[False, True], ignore_index=True)
    board["rank"] = board["score"].rank(method="min", ascending=False).fillna(0).astype("int64")
    return board[list(columns)].astype(columns)


def _check_budgets(budgets_h: Iterable[float]) -> list[float]:
    hours = sorted({float(h) for h in budgets_h})
    bad = [h for h in hours if not (math.isfinite(h) and h > 0)]
    if bad:
        raise SforgeError(f"time budgets must be positive hours, got {bad[0]!r}")
    return hours


def budget_rows(bench: Benchmark, scores: pd.DataFrame, budgets_h: Iterable[float]) -> pd.DataFrame:
    """Per source with elapsed times and per budget: the leaderboard mean from the best valid
    result submitted within the budget. Submissions without elapsed_s are left out."""
    hours = _check_budgets(budgets_h)
    timed = scores[scores["elapsed_s"].notna()]
    sources = pd.Index(sorted(timed["source"].unique()), name="source", dtype="str")
    if not len(sources) or not hours:
        return _empty(BUDGETS_COLUMNS)
    ranked = _ranked(bench, timed)  # sorted once; a filter keeps the order
    frames = []
    for h in hours:  # a handful of budgets, each vectorized over all rows
        best = _best_of(bench, ranked[ranked["elapsed_s"] <= h * 3600.0])
        means = _means(bench, best, sources)[["score", "tasks_valid"]].reset_index()
        means.insert(1, "budget_h", h)
        frames.append(means)
    return pd.concat(frames, ignore_index=True)[list(BUDGETS_COLUMNS)].astype(BUDGETS_COLUMNS)


def _hours_label(h: float) -> str:
    return f"{h:g}h"


def _markdown(bench: Benchmark, board: pd.DataFrame, budgets: pd.DataFrame) -> str:
    lines = [f"# Leaderboard: {bench.name}", ""]
    lines.append(
        f"Score: mean rescaled (0–100) best valid result over all {len(bench.tasks)} tasks; "
        "a task without a valid result, or without a rescale table, counts 0.")
    lines += ["", _board_markdown(board) if len(board) else "No graded submissions yet.", ""]
    if len(budgets):
        wide = budgets.pivot(index="source", columns="budget_h", values="score")
        wide = wide.rename(columns=_hours_label).reset_index()
        lines += ["## Time budgets", "",
                  "Mean score from the best result submitted within each agent-time budget.", "",
                  wide.to_markdown(index=False, floatfmt=".2f"), ""]
    return "\n".join(lines)


def _board_markdown(board: pd.DataFrame) -> str:
    shown = board.dropna(axis=1, how="all") if len(board) else board
    keep = [c for c in board.columns if c in shown.columns or c in ("score", "rank", "source")]
    return board[keep].to_markdown(index=False, floatfmt=".2f")


def write_leaderboard(benchmark: Benchmark, best_csv: Path, scores_csv: Path, out_csv: Path,
                      out_md: Path, out_budgets: Path,
                      budgets_h: Sequence[float] = DEFAULT_BUDGETS_H) -> None:
    """leaderboard.csv, leaderboard.md and budgets.csv from best.csv and scores.csv.

    budgets_h: the time budgets in hours (any list; sorted, duplicates dropped)."""
    with _bulk():
        scores = read_scores(scores_csv, RANKING_COLUMNS)
        board = leaderboard_rows(benchmark, read_best(best_csv), scores)
        budgets = budget_rows(benchmark, scores, budgets_h)
    _write_csv(board, Path(out_csv))
    _write_csv(budgets, Path(out_budgets))
    atomic_write_text(Path(out_md), _markdown(benchmark, board, budgets))


def leaderboard_text(leaderboard_csv: Path) -> str:
    """The leaderboard for the terminal, as a Markdown table."""
    board = read_leaderboard(leaderboard_csv)
    if board.empty:
        return "No graded submissions yet."
    return _board_markdown(board)
