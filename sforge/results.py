"""The eval result: the one record a judge run leaves under <results>/<bench>/evals/.

Only a grader's verdict becomes a result (valid or invalid, with a reason); infrastructure
failures raise instead, so no file is written and the next run retries.

A result is never lost: one that is replaced (a re-grade on purpose, `--force`/`--regrade`)
goes to evals/<task>/history/<key>.<when>.<pid>.<why>.json; the tables read only the newest,
evals/<task>/<key>.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .fileio import atomic_write_json, read_json

HISTORY_DIR = "history"


def eval_key(judge_tag: str, submission_sha256: str, settings: dict[str, Any]) -> str:
    """Same key, same result: judge image, archive bytes and the judge's runtime settings."""
    blob = json.dumps({"judge": judge_tag, "submission": submission_sha256,
                       "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass
class Rejected:
    path: str
    reason: str


@dataclass
class Changed:
    """A submitted member kept with different metadata (a stripped bit, a dropped xattr)."""
    path: str
    change: str


@dataclass
class EvalResult:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        data = dict(data)
        data["rejected"] = [Rejected(**r) for r in data.get("rejected", [])]
        data["changed"] = [Changed(**c) for c in data.get("changed", [])]
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, path: Path) -> None:
        """Store atomically; a result it replaces is kept in history/ first."""
        path = Path(path)
        if path.exists():
            _keep_in_history(path, "superseded")
        atomic_write_json(path, self.to_dict())

    @classmethod
    def read(cls, path: Path) -> EvalResult:
        return cls.from_dict(read_json(path))


def history_path(path: Path, why: str) -> Path:
    """Where a result file set aside goes: evals/<task>/history/<key>.<when>.<pid>.<why>.json"""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return path.parent / HISTORY_DIR / f"{path.stem}.{stamp}.{os.getpid()}.{why}{path.suffix}"


def _keep_in_history(path: Path, why: str) -> Path | None:
    """A hard link (else a copy) of `path` in history/; None when it vanished meanwhile."""
    dest = history_path(path, why)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, dest)
    except FileNotFoundError:
        return None
    except FileExistsError:
        return dest
    except OSError:  # no hard links on this filesystem
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
    log = path.with_suffix(".log")
    if log.exists():
        os.replace(log, dest.with_suffix(".log"))
    return dest
