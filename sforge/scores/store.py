"""The table store: each task's part of the tables (its rows' place in scores.csv, its best
rows, index entry, budgets) and the folder fingerprints it was made from, in
.cache/scores.csv.parts. Without pandas: deciding that nothing needs computing (the usual
`sforge report` in a CI job that graded nothing new) must not cost pandas' import."""

from __future__ import annotations

import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sforge.core.fileio import atomic_write_bytes
from sforge.scores.cache import dump_bytes, load_bytes, stat_sig
from sforge.scores.columns import BEST_COLUMNS, INVALID_FIELDS

log = logging.getLogger("sforge.scores.parts")

PARTS_VERSION = "5"


@dataclass
class TablePaths:
    """Where the tables go (Layout's names)."""
    scores: Path
    best: Path
    leaderboard: Path
    leaderboard_md: Path
    budgets: Path

    def every(self) -> list[Path]:
        """Every table file: the tables are current only when all of them exist."""
        return [self.scores, self.best, self.leaderboard, self.leaderboard_md, self.budgets]


def parts_path(scores_csv: Path) -> Path:
    """Where the store of the tables at `scores_csv` is kept."""
    return scores_csv.parent / ".cache" / f"{scores_csv.name}.parts"



_STORES: dict[tuple[str, ...], tuple[dict[str, Any], dict[str, Any], str | None]] = {}


def _csv_sig(scores_csv: Path) -> str | None:
    try:
        return stat_sig(os.stat(scores_csv))
    except OSError:
        return None


def load_store(scores_csv: Path) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """(parts, fingerprints, stat of the scores.csv written with them) as stored; read once
    per process while the files stay put. A part's rows are where it says in that
    scores.csv: when the file there is no longer that one (gone, or written by anything
    else), every part is left out (computed again)."""
    store = parts_path(scores_csv)
    try:
        memo = (os.fspath(store), stat_sig(os.stat(store)), str(_csv_sig(scores_csv)))
        if memo in _STORES:
            return _STORES[memo]
        cached = load_bytes(store.read_bytes())
    except (OSError, ValueError):
        return {}, {}, None
    if not isinstance(cached, dict) or cached.get("version") != PARTS_VERSION:
        return {}, {}, None
    parts, fps, csv = cached.get("parts"), cached.get("fingerprints"), cached.get("csv")
    if not isinstance(parts, dict) or csv is None or csv != _csv_sig(scores_csv):
        parts, csv = {}, None
    parts = {t: p for t, p in parts.items() if _well_formed(p)}
    _STORES.clear()
    _STORES[memo] = (parts, fps if isinstance(fps, dict) else {}, csv)
    return _STORES[memo]


def _strings(value: Any) -> bool:
    return type(value) is list and all(type(x) is str for x in value)


def _columns(value: Any, names: Any) -> bool:
    """A dict of one list per name, all of one length."""
    return type(value) is dict and value.keys() == set(names) and all(
        type(v) is list for v in value.values()) and len({len(v) for v in value.values()}) <= 1


def _well_formed(p: Any) -> bool:
    """Whether a stored part is of the shape _make_parts gives: a part of any other (a
    store edited by hand or damaged) is dropped and its task computed again, never taken
    for a table."""
    if type(p) is not dict:
        return False
    at, index, people = p.get("at"), p.get("index"), p.get("people")
    return (type(at) is list and len(at) == 2 and all(type(x) is int and x >= 0 for x in at)
            and _columns(p.get("best"), BEST_COLUMNS)
            and type(index) is dict and type(index.get("graded")) is int
            and type(index.get("invalid")) is int and _strings(index.get("sources"))
            and _columns(index.get("bad"), INVALID_FIELDS)
            and type(p.get("budgets")) is list
            and all(type(b) is list and len(b) == 3 for b in p["budgets"])
            and type(people) is dict and all(
                type(v) is list and len(v) == 2 and all(map(_strings, v))
                for v in people.values())
            and _strings(p.get("timed")) and _strings(p.get("dirs")))


def save_store(scores_csv: Path, parts: dict[str, dict[str, Any]], csv: str | None,
               fps: dict[str, Any]) -> None:
    """The store: each part (its rows by their place in the scores.csv whose stat is `csv`)
    and the fingerprints."""
    # orjson writes NaN as null, read back as NaN; only an infinity needs json's literal.
    finite = not any(isinstance(x, float) and math.isinf(x) for p in parts.values()
                     for c in ("score", "rescaled", "elapsed_s") for x in p["best"][c])
    store = parts_path(scores_csv)
    try:
        atomic_write_bytes(store, dump_bytes({
            "version": PARTS_VERSION, "csv": csv, "fingerprints": fps,
            "parts": {t: {k: v for k, v in p.items() if k != "lines"} for t, p in parts.items()}},
            finite))
        old_lines = store.with_name(f"{store.name}.lines")  # version 3 kept rows apart
        if old_lines.is_dir():
            shutil.rmtree(old_lines, ignore_errors=True)
    except OSError as exc:  # a read-only tree still aggregates, only slower
        log.warning("cannot write the table cache %s: %s", store, exc)


def fresh_tasks(scores_csv: Path, fingerprints: dict[str, str | None]) -> set[str]:
    """The tasks whose stored part (or stored absence of rows) has this very fingerprint."""
    old, old_fps, _ = load_store(scores_csv)
    return fresh_among(old, old_fps, fingerprints)


def fresh_among(old: dict[str, Any], old_fps: dict[str, Any],
                fingerprints: dict[str, str | None]) -> set[str]:
    """The tasks of `fingerprints` whose stored part (or stored absence of rows) has that
    very fingerprint, among the stored parts `old` and their fingerprints `old_fps`."""
    return {t for t, fp in fingerprints.items() if fp is not None and (
        (t in old and old_fps.get(t) == fp) or old_fps.get(f"{t}\0empty") == fp)}


def kept_fingerprints(fingerprints: dict[str, str | None], parts: dict[str, Any]
                      ) -> dict[str, str]:
    """The fingerprints the store keeps for these parts: a task with a part by its id, one
    without rows as "<id>\0empty"; a task without a fingerprint (changed too recently) not."""
    return {t if t in parts else f"{t}\0empty": fp for t, fp in fingerprints.items()
            if fp is not None}


def stored_parts_if_current(scores_csv: Path, fingerprints: dict[str, str | None],
                            outputs: list[Path]) -> dict[str, Any] | None:
    """The stored parts when the tables stand as they are for these fingerprints (every
    task's fingerprint is the stored one, no task added or gone, every table there): what
    update_tables would then leave untouched. Else None."""
    old, old_fps, _ = load_store(scores_csv)
    fresh = fresh_among(old, old_fps, fingerprints)
    if len(fresh) != len(fingerprints):
        return None
    parts = {t: old[t] for t in sorted(fresh) if t in old}
    if list(parts) != list(old) or kept_fingerprints(fingerprints, parts) != old_fps:
        return None
    return parts if all(p.exists() for p in outputs) else None
