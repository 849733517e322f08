"""The tables' schemas and their CSV reading and writing (and the ranking-column sidecar of
scores.csv).

Column → dtype of each table: the files are written and read back through these, so a task
id like "0012" stays a string and an empty field is the only missing value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_bytes, atomic_write_text
from sforge.scores.cache import dump_bytes, load_bytes, stat_sig
from sforge.scores.columns import (
    BEST_COLUMNS,
    BUDGETS_COLUMNS,
    LEADERBOARD_HEAD,
    LEADERBOARD_TAIL,
    SCORES_COLUMNS,
)

log = logging.getLogger(__name__)

def empty_table(columns: Mapping[str, str]) -> pd.DataFrame:
    """A table of no rows with these columns and their dtypes."""
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
    (tests/unit/test_scores.py checks it) but for one fix: a field holding a carriage return is
    quoted, where pandas leaves it bare and its own reader then splits the row in two (a
    grader's summary may well hold one). Any other table goes to pandas."""
    simple = all(str(t) in ("float64", "bool", "int64", "str") for t in df.dtypes)
    if not simple or len(df.columns) < 2 or not len(df):
        return df.to_csv(index=False, lineterminator="\n")
    header = ",".join(_csv_field_strings(pd.Series(list(df.columns), dtype="str")))
    return header + "\n" + "".join(csv_lines(df))


def csv_lines(df: pd.DataFrame) -> list[str]:
    """The rows of csv_text (each ending in a newline), for a frame of our column types."""
    columns = [_csv_field_strings(df[c]) for c in df.columns]
    return [",".join(row) + "\n" for row in zip(*columns, strict=True)]


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """One of our CSVs, written atomically as csv_text writes it."""
    atomic_write_text(Path(path), csv_text(df))


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
    return stat_sig(os.stat(path))


def write_sidecar(table: pd.DataFrame, csv: Path) -> None:
    """The ranking columns of scores.csv beside it, tagged with its stat (see read_scores)."""
    columns = {c: table[c].tolist() for c in RANKING_COLUMNS}  # NaN → null → NaN again
    finite = not any(np.isinf(table[c].to_numpy()).any() for c in RANKING_COLUMNS
                     if SCORES_COLUMNS[c] == "float64")
    try:
        blob = dump_bytes({"version": _SIDECAR_VERSION, "csv": _file_sig(csv),
                           "rows": len(table), "columns": columns}, finite)
        atomic_write_bytes(_sidecar_path(csv), blob)
    except OSError as exc:  # no sidecar: the readers parse the CSV
        log.warning("cannot write %s: %s", _sidecar_path(csv), exc)


def _read_sidecar(csv: Path, usecols: Sequence[str]) -> pd.DataFrame | None:
    try:
        sig = _file_sig(csv)
        data = load_bytes(_sidecar_path(csv).read_bytes())
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
    """best.csv with its schema."""
    return read_table(path, BEST_COLUMNS)


def read_budgets(path: Path) -> pd.DataFrame:
    """budgets.csv with its schema."""
    return read_table(path, BUDGETS_COLUMNS)


def read_leaderboard(path: Path) -> pd.DataFrame:
    """leaderboard.csv (its category columns vary with the benchmark)."""
    return read_table(path, {**LEADERBOARD_HEAD, **LEADERBOARD_TAIL})


def leaderboard_records(path: Path) -> list[dict[str, Any]]:
    """leaderboard.csv's rows as JSON takes them: numbers as numbers, an empty field null."""
    frame = read_leaderboard(path).astype(object)
    return [{k: (None if v is None or v != v else v) for k, v in row.items()}
            for row in frame.where(frame.notna(), None).to_dict(orient="records")]


