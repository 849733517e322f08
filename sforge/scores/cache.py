"""The result cache: eval result files parsed once, then kept by (inode, size, mtime, ctime).

Reading 100,000 result files costs seconds (JSON parsing holds the GIL); parsed results are
cached next to scores.csv, one shard per result directory, so re-aggregation only parses the
files that changed. The cache only ever saves time, it never decides a score.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_bytes, open_regular
from sforge.core.fileio import loads_json as load_bytes
from sforge.core.forking import fork_map
from sforge.grading.feedback import Feedback, compact_feedback, json_text

log = logging.getLogger(__name__)

# Fields taken from each eval result JSON (sforge.grading.results.EvalResult).
RESULT_FIELDS = ("task", "submission", "key", "valid", "score", "summary", "reason",
                  "duration_s", "finished_at", "judge_image", "judge_image_id")
_CACHE_VERSION = "4"  # 4: judge_image_id; 3: each entry ends with the feedback
# Result directories a worker process must have to be worth its start (sforge.core.forking): a
# cold read of 100,000 results over 200 directories parses on every core.
DIRS_PER_PROCESS = 25
# Positions of the float fields in a cache entry ([signature, *fields]).
_SCORE_AT = 1 + RESULT_FIELDS.index("score")
_DURATION_AT = 1 + RESULT_FIELDS.index("duration_s")
_FEEDBACK_AT = 1 + len(RESULT_FIELDS)
_SUMMARY_AT, _REASON_AT = 1 + RESULT_FIELDS.index("summary"), 1 + RESULT_FIELDS.index("reason")


def dump_bytes(data: Any, finite: bool = True) -> bytes:
    """orjson, unless the caller knows of a float that is not finite (orjson would write
    null) or a string is not UTF-8 (a lone surrogate): then json, which load_bytes reads back."""
    if finite:
        with contextlib.suppress(TypeError):
            return orjson.dumps(data)
    return json.dumps(data, separators=(",", ":")).encode()


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def missing_result(path: str) -> SforgeError:
    """The error of a result file the tables need and do not find."""
    return SforgeError(f"{path}: eval result missing (grade it before aggregating)")


def stat_sig(st: os.stat_result) -> str:
    """A file's identity and version as the caches compare it (inode, size, mtime, ctime)."""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _parse_result(path: str) -> tuple[str, tuple[Any, ...], list[Any]]:
    """(signature, fields, compact feedback) of one eval result; SforgeError naming the file
    when it is broken.

    os.open/fstat/read rather than open(): a third of the cost for 100k small files, and the
    signature is that of the very bytes parsed."""
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        raise missing_result(path) from None
    except OSError as exc:
        raise SforgeError(f"{path}: unreadable eval result: {exc}") from None
    try:
        blob = os.read(fd, st.st_size + 1)
        if len(blob) > st.st_size:  # grew since fstat (never for an atomic write): read on
            chunks = [blob]
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            blob = b"".join(chunks)
        data = load_bytes(blob, bulk=True)
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
    duration = float(duration) if isinstance(duration, int | float) \
        and not isinstance(duration, bool) else None
    key = data.get("key")
    return stat_sig(st), (data["task"], data["submission"],
                          key if isinstance(key, str) and key else Path(path).stem,
                      data["valid"], score, _opt_text(data.get("summary")),
                      _opt_text(data.get("reason")), duration,
                      _opt_text(data.get("finished_at")) or None,
                      _opt_text(data.get("judge_image")) or None,
                      _opt_text(data.get("judge_image_id")) or None), \
        compact_feedback(data)


def _opt_text(value: Any) -> str | None:
    """A text field of a result as text (None when absent): what a foreign grader put there
    as a number, a list or an object is shown as its JSON."""
    return None if value is None else json_text(value)


# The types of an entry's fields, as _parse_result makes them (a cache entry of any other
# shape was not made by it: a damaged or hand-edited shard, its file parsed again).
_NONE = type(None)
_FIELD_TYPES = ((str,), (str,), (str,), (bool,), (float, _NONE), (str, _NONE), (str, _NONE),
                (float, _NONE), (str, _NONE), (str, _NONE), (str, _NONE))
assert len(_FIELD_TYPES) == len(RESULT_FIELDS)
_ENTRY_TYPES = frozenset(itertools.product(*_FIELD_TYPES))  # one set lookup an entry


def cache_path(out: Path) -> Path:
    """Where the parsed results of the tables at `out` (scores.csv) are cached."""
    # <results>/<bench>/.cache/ when out is <results>/<bench>/scores.csv (layout.cache).
    return out.parent / ".cache" / f"{out.name}.results"


def _shard_path(cache: Path, directory: str) -> Path:
    return cache / f"{hashlib.sha256(directory.encode()).hexdigest()[:24]}.json"


def _load_shard(path: Path, directory: str) -> dict[str, list[Any]]:
    try:
        data = load_bytes(path.read_bytes(), bulk=True)
    except (OSError, ValueError):
        return {}  # no cache yet, or a broken one: parse everything
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION \
            or data.get("fields") != list(RESULT_FIELDS) or data.get("dir") != directory \
            or not isinstance(data.get("results"), dict):
        return {}
    return data["results"]


def _cached_entry(entry: Any, path: str) -> list[Any] | None:
    """The cached entry if the file is still the one it was parsed from."""
    if not (isinstance(entry, list) and len(entry) == len(RESULT_FIELDS) + 2) \
            or tuple(map(type, entry[1:_FEEDBACK_AT])) not in _ENTRY_TYPES:
        return None
    try:
        return entry if entry[0] == stat_sig(os.stat(path)) else None
    except FileNotFoundError:
        raise missing_result(path) from None
    except OSError:  # a link loop, a name too long: parsing says why it is unreadable
        return None


def prune_shards(cache: Path, directories: set[str]) -> None:
    """Drop the cache shards of result directories no longer aggregated."""
    if not cache.is_dir():
        return
    keep = {_shard_path(cache, d).name for d in directories}
    for old in cache.glob("*.json"):
        if old.name not in keep:
            old.unlink(missing_ok=True)


def read_results(paths: Iterable[str], cache: Path | None = None, *,
                 on_unreadable: Callable[[str, str], object] | None = None,
                 prune: bool = True, known: Mapping[str, tuple[Any, ...]] | None = None
                 ) -> dict[str, tuple[Any, ...]]:
    """path → the result fields scores.csv needs (RESULT_FIELDS), for each distinct path.

    With `cache` (a directory), a file whose (inode, size, mtime, ctime) matches the cached
    signature is not parsed again. Results are written atomically (a new inode), so a regraded
    file always shows a new signature; the cache only ever saves time, it never decides a
    score. One cache file per result directory (evals/<task>/): a changed result rewrites a
    few hundred entries, not all 100,000 (0.8 s of JSON).

    A file that exists but cannot be read as a result raises SforgeError naming it, unless
    `on_unreadable(path, why)` takes it (then it is left out, as is a file that is not
    there: the caller grades what is missing). `prune=False` keeps the cache files of
    result directories not asked about (a partial read). `known`: fields this process read
    moments ago (read_results' own answer), taken as they are.
    """
    by_dir: dict[str, list[str]] = {}
    out: dict[str, tuple[Any, ...]] = {}
    for path in dict.fromkeys(paths):
        if known is not None and path in known:
            out[path] = known[path]
        else:
            by_dir.setdefault(os.path.dirname(path), []).append(path)
    tolerate = on_unreadable is not None

    def one(item: tuple[str, list[str]]) -> _DirRead:
        return _read_dir(cache, *item, tolerate)

    parsed = 0
    for found, unreadable, n in fork_map(one, list(by_dir.items()), DIRS_PER_PROCESS):
        out.update(found)
        parsed += n
        for path, why in unreadable:
            assert on_unreadable is not None
            on_unreadable(path, why)
    if cache is not None and prune:
        prune_shards(cache, {os.path.dirname(p) for p in out})
    log.debug("eval results: %d read, %d parsed", len(out), parsed)
    return out


# One directory's reading: (path → fields, the unreadable files with why, how many parsed)
_DirRead = tuple[dict[str, tuple[Any, ...]], list[tuple[str, str]], int]


def _read_dir(cache: Path | None, directory: str, members: list[str],
              tolerate: bool) -> _DirRead:
    """read_results for the files `members` of one directory, its cache shard rewritten
    when anything in it changed. With `tolerate`, a file that exists but cannot be read is
    returned with why rather than raised (the caller's on_unreadable takes it), and one
    that is not there is left out."""
    shard = _shard_path(cache, directory) if cache is not None else None
    cached = _load_shard(shard, directory) if shard is not None else {}
    fresh: dict[str, list[Any]] = {}
    out: dict[str, tuple[Any, ...]] = {}
    unreadable: list[tuple[str, str]] = []
    parsed = 0
    for path in members:  # an I/O loop: a stat per file, a parse per change
        name = os.path.basename(path)
        try:
            entry = _cached_entry(cached.get(name), path)
            if entry is None:
                sig, fields, feedback = _parse_result(path)
                entry = [sig, *fields, feedback]
                parsed += 1
        except SforgeError as exc:
            if not tolerate:
                raise
            if os.path.lexists(path):  # a link loop or a dangling link is there, unread
                unreadable.append((path, str(exc).removeprefix(f"{path}: ")))
            continue
        fresh[name] = entry
        out[path] = tuple(entry[1:_FEEDBACK_AT])
    if shard is not None and fresh != cached:
        finite = all(_finite(e[_SCORE_AT]) and _finite(e[_DURATION_AT]) for e in fresh.values())
        blob = dump_bytes({"version": _CACHE_VERSION, "fields": list(RESULT_FIELDS),
                            "dir": directory, "results": fresh}, finite)
        try:
            atomic_write_bytes(shard, blob)
        except OSError as exc:  # a read-only results tree still aggregates, only slower
            log.warning("cannot write the result cache %s: %s", shard, exc)
    return out, unreadable, parsed


def cached_feedback(cache: Path, directory: str) -> dict[str, Feedback]:
    """file name → Feedback of the results of `directory` as its cache shard holds them:
    the very parse the scores were taken from (a report page reads one shard, not 500
    files). A file the shard does not hold is not there: its caller reads the file."""
    out = {}
    for name, entry in _load_shard(_shard_path(cache, directory), directory).items():
        if isinstance(entry, list) and len(entry) == _FEEDBACK_AT + 1:
            feedback = Feedback.from_compact(entry[_FEEDBACK_AT], entry[_SUMMARY_AT],
                                             entry[_REASON_AT])
            if feedback is not None:
                out[name] = feedback
    return out
