"""The eval result: the one record a judge run leaves under <results>/<bench>/evals/.

Only a grader's verdict becomes a result (valid or invalid, with a reason); infrastructure
failures raise instead, so no file is written and the next run retries.

Writing is the one place judge text is made safe, once: lone surrogates (a non-UTF-8 file
name a grader echoed) and control characters other than tab, newline and carriage return
become U+FFFD, and summary, reason, details, metrics and the rejected list are capped, each
with a note of what was cut, so every reader (report, scores, a terminal) gets a small,
valid, printable record.

A result file is only ever replaced atomically; the one it replaces, and any result file that
cannot be read back, goes to evals/<task>/history/ (with a warning) so nothing is lost and
the unreadable one is graded again. A result graded again on purpose (`regrading`) stays the
current one unless a new verdict replaces it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from sforge.core.fileio import SURROGATES, atomic_write_json, read_json

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 4096
MAX_REASON_CHARS = 4096
MAX_DETAILS_BYTES = 256 << 10  # of JSON
MAX_METRICS_BYTES = 64 << 10
MAX_REJECTED = 1000
MAX_NAME_CHARS = 1024  # a rejected path or a dict key
MAX_DEPTH = 32  # levels of nesting kept in details and metrics
HISTORY_DIR = "history"

# Lone surrogates, C0 controls but tab, newline and CR, DEL and C1 controls (terminal escapes).
_UNSAFE = re.compile(f"[{SURROGATES}\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def clean_text(text: str, limit: int | None = None) -> str:
    """`text` printable and encodable as UTF-8, cut at `limit` characters with a note."""
    text = _UNSAFE.sub("\ufffd", text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… [sforge: {len(text) - limit} more characters cut]"
    return text


def _clean(value: Any, depth: int = 0) -> Any:
    """A JSON-like value as standard JSON can hold it: every string cleaned (keys too), a
    number that is not finite null, what lies deeper than MAX_DEPTH levels a note (so
    storing, printing and reading it back never runs out of recursion)."""
    if isinstance(value, str):
        return clean_text(value, MAX_SUMMARY_CHARS)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        return f"[sforge: nested deeper than {MAX_DEPTH} levels, cut]"
    if isinstance(value, dict):
        return {clean_text(str(k), MAX_NAME_CHARS): _clean(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v, depth + 1) for v in value]
    return value


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


def _capped_list(items: list[Any], budget: int) -> list[Any]:
    """The first items whose JSON fits in `budget` bytes, then a note of how many were cut."""
    out: list[Any] = []
    used = 0
    for i, item in enumerate(items):
        used += _json_size(item) + 2
        if used > budget:
            out.append(f"[sforge: {len(items) - i} of {len(items)} entries cut: details over "
                       f"{budget} bytes]")
            break
        out.append(item)
    return out


def _capped_dict(data: dict[str, Any], budget: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    used = 0
    for i, (k, v) in enumerate(data.items()):
        used += _json_size({k: v})
        if used > budget:
            out["sforge_cut"] = f"{len(data) - i} of {len(data)} entries cut: over {budget} bytes"
            break
        out[k] = v
    return out


# How sforge itself grades: the archive filter and the defaults of its limits, what metadata
# extraction keeps, the judge container's hardening and the defaults of its limits, how
# result.json is read. It is part of every eval key, so bump it when (and only when) a change
# to any of those can move a verdict: every result then re-grades once, and `sforge plan`
# says how many. The limits config.yaml sets apart from those defaults (archive_limits,
# judge_limits) are the key's `limits` (sforge.grading.contract.key_limits). History:
#   1  the key records the contract (archive headers count toward the size cap, a corrupt
#      archive is an invalid result, judge containers bounded in pids).
GRADING_CONTRACT = 1


def eval_key(judge_tag: str, submission_sha256: str, settings: dict[str, Any], *,
             limits: dict[str, Any]) -> str:
    """Same key, same result: judge image, archive bytes, the judge's runtime settings, the
    limits that differ from the defaults (sforge.grading.contract.key_limits: {} at the
    defaults) and the grading contract."""
    return eval_keyer(judge_tag, settings, limits=limits)(submission_sha256)


def key_head(judge_tag: str, settings: dict[str, Any], *, limits: dict[str, Any]) -> str:
    """What keys every result of one judge and its settings, the archive apart: the grading
    contract, the judge image, the judge's runtime settings and the configured limits that
    differ from the defaults (absent when none do, so default limits leave every key as it
    was). Anything cached from results (sforge.scores.folders) depends on exactly this."""
    material: dict[str, Any] = {"contract": GRADING_CONTRACT, "judge": judge_tag,
                                "settings": settings}
    if limits:
        material["limits"] = limits
    return json.dumps(material, sort_keys=True)


def eval_keyer(judge_tag: str, settings: dict[str, Any], *,
               limits: dict[str, Any]) -> Callable[[str], str]:
    """eval_key of one judge, its settings and limits, for many archives: the JSON of
    {"contract", "judge", "limits" (when any), "settings", "submission"} (sorted keys, so
    the archive's sha256 comes last) is made once up to the sha256 (100,000 keys: seconds →
    a tenth)."""
    head = key_head(judge_tag, settings, limits=limits)[:-1] + ', "submission": '

    def key(submission_sha256: str) -> str:
        blob = f"{head}{json.dumps(submission_sha256)}}}"
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    return key


@dataclass
class Rejected:
    """An archive member that was not extracted, and why."""
    path: str
    reason: str


@dataclass
class Changed:
    """A submitted member kept with different metadata (a stripped bit, a dropped xattr)."""
    path: str
    change: str


@dataclass
class EvalResult:
    """The verdict on one archive under one eval key: score, validity, and how the judge ran."""
    task: str
    submission: str  # sha256 of the archive bytes
    key: str
    valid: bool
    score: float | None
    summary: str
    details: list[Any] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # why sforge found it invalid (timeout, no result.json, …)
    timed_out: bool = False
    oom_killed: bool = False
    exit_code: int | None = None
    duration_s: float = 0.0
    started_at: str = ""
    finished_at: str = ""
    judge_image: str = ""
    judge_settings: dict[str, Any] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)
    changed: list[Changed] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a wrongly rooted archive
    sforge_version: str = ""
    log: str | None = None
    # provenance (additive: older results lack them and still load; never part of the key)
    judge_image_id: str = ""          # the judge image's id as the engine resolved the tag
    grading_contract: int | None = None
    host: str = ""                    # the node name of the machine that graded it

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON data."""
        return asdict(self)

    def sanitised(self) -> EvalResult:
        """A copy safe to store and print: text cleaned, every listing capped with a note."""
        # shallow: the grader's details and metrics are made safe by _clean, not copied first
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["rejected"] = [asdict(r) if is_dataclass(r) else r for r in self.rejected]
        data["changed"] = [asdict(c) if is_dataclass(c) else c for c in self.changed]
        data["summary"] = clean_text(str(data["summary"] or ""), MAX_SUMMARY_CHARS)
        if data["reason"] is not None:
            data["reason"] = clean_text(str(data["reason"]), MAX_REASON_CHARS)
        details = data["details"] if isinstance(data["details"], list) else [data["details"]]
        data["details"] = _capped_list(_clean(details), MAX_DETAILS_BYTES)
        metrics = data["metrics"] if isinstance(data["metrics"], dict) else {}
        data["metrics"] = _capped_dict(_clean(metrics), MAX_METRICS_BYTES)
        rejected = [{"path": clean_text(str(r["path"]), MAX_NAME_CHARS),
                     "reason": clean_text(str(r["reason"]), MAX_NAME_CHARS)}
                    for r in data["rejected"][:MAX_REJECTED]]
        if len(data["rejected"]) > MAX_REJECTED:
            rejected.append({"path": "…", "reason": f"{len(data['rejected']) - MAX_REJECTED} "
                             "more rejected members not listed"})
        data["rejected"] = rejected
        changed = [{k: clean_text(str(v), MAX_NAME_CHARS) for k, v in c.items()}
                   for c in data["changed"][:MAX_REJECTED]]
        if len(data["changed"]) > MAX_REJECTED:
            changed.append({"path": "…", "change": f"{len(data['changed']) - MAX_REJECTED} more "
                            "changed members not listed"})
        data["changed"] = changed
        data["warnings"] = [clean_text(str(w), MAX_REASON_CHARS) for w in data["warnings"][:20]]
        for key in ("task", "submission", "key", "judge_image", "log", "started_at",
                    "finished_at", "sforge_version", "judge_image_id", "host"):
            if isinstance(data.get(key), str):
                data[key] = clean_text(data[key], MAX_NAME_CHARS * 4)
        return EvalResult.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        """A result from JSON data; unknown fields are ignored."""
        data = dict(data)
        data["rejected"] = [Rejected(**r) for r in data.get("rejected", [])]
        data["changed"] = [Changed(**c) for c in data.get("changed", [])]
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, path: Path) -> EvalResult:
        """Store the sanitised result atomically; a result it replaces goes to history/.
        Returns what was stored."""
        clean = self.sanitised()
        path = Path(path)
        if path.exists():
            _keep_in_history(path, "superseded")
        atomic_write_json(path, clean.to_dict())
        return clean

    @classmethod
    def read(cls, path: Path) -> EvalResult:
        """The result at `path`; ValueError when it is not an eval result."""
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("valid"), bool) or \
                not isinstance(data.get("task"), str) or \
                not isinstance(data.get("submission"), str):
            raise ValueError("not an eval result (needs task, submission and a boolean valid)")
        return cls.from_dict(data)


def history_path(path: Path, why: str) -> Path:
    """Where a result file that is set aside goes: evals/<task>/history/<key>.<when>.<why>.json"""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return path.parent / HISTORY_DIR / f"{path.stem}.{stamp}.{os.getpid()}.{why}{path.suffix}"


def _keep_in_history(path: Path, why: str) -> Path | None:
    """A hard link of `path` in history/ (the caller replaces or removes the original); None
    when it vanished meanwhile."""
    dest = history_path(path, why)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, dest)
    except FileNotFoundError:
        return None
    except FileExistsError:
        return dest
    except OSError:  # no hard links here (some shared filesystems): a copy
        import shutil

        try:
            shutil.copy2(path, dest)
        except FileNotFoundError:
            return None
    return dest


def retire(path: Path, why: str = "regraded") -> Path | None:
    """Move a stored result (and its log) into history/, so its key is graded again and the
    old verdict stays readable; → where the result went, None when there was none."""
    path = Path(path)
    dest = history_path(path, why)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, dest)
    except FileNotFoundError:
        return None
    log_file = path.with_suffix(".log")
    if log_file.exists():
        os.replace(log_file, dest.with_suffix(".log"))
    return dest


@contextmanager
def regrading(paths: Iterable[Path], why: str = "regraded") -> Iterator[int]:
    """Retire the stored results `paths` (see `retire`) for the block, so they are graded
    again; → yields how many were retired. Leaving the block, however it is left, puts each
    one that no new result replaced back in place, with its log: an infrastructure failure
    (no daemon, a judge that does not start, Ctrl-C) leaves the earlier result the current
    one, and a new result is never overwritten."""
    moved = [(Path(p), dest) for p in paths if (dest := retire(Path(p), why)) is not None]
    try:
        yield len(moved)
    finally:
        for path, dest in moved:
            _restore(path, dest)


def _restore(path: Path, dest: Path) -> None:
    """Move the retired result `dest` back to `path` (and its log) unless a result is there."""
    try:
        os.link(dest, path)  # never replaces a result written meanwhile
    except FileNotFoundError:
        return
    except FileExistsError:
        return
    except OSError:  # no hard links here (some shared filesystems)
        if path.exists():
            return
        os.replace(dest, path)
    else:
        dest.unlink()
    old_log, log_file = dest.with_suffix(".log"), path.with_suffix(".log")
    if old_log.exists():
        if log_file.exists():  # the failed attempt's log is kept in history/ beside it
            os.replace(log_file, history_path(path, "failed").with_suffix(".log"))
        os.replace(old_log, log_file)


def set_aside(path: Path, problem: str) -> Path | None:
    """Retire an unreadable result file (with a warning) so it is graded again. → where it
    went, or None if another process moved it first."""
    dest = retire(path, "unreadable")
    if dest is None:
        return None
    log.warning("sforge: warning: %s: %s; moved to %s, it will be graded again", path,
                problem, dest)
    return dest


def load_result(path: Path) -> EvalResult | None:
    """The result stored at `path`; None when there is none. An unreadable one is set aside
    (see `set_aside`) and None returned, so it is graded again."""
    try:
        return EvalResult.read(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        set_aside(path, f"unreadable eval result: {str(exc)[:300]}")
        return None
