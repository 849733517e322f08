"""Which tasks changed since the tables were last made, told by folder stats alone.

Statting every archive and every result of 100,000 costs more than a second on a loaded
2-core machine; `sforge report` after one changed result must cost less than that in all.
A task's inputs live in a few folders: <root>/<source>/<task>/ for each submission root and
evals/<task>/ for its results. Adding, removing or renaming a file changes its folder's
mtime and ctime, and sforge only ever writes results (and its own archive store) by an
atomic rename, so a regraded, set-aside or new result, and a new, removed or replaced
archive, all change a folder. A task's fingerprint is those folder stats plus everything of
the task its tables and page show (what keys its results, as sforge.grading.results.key_head says:
the grading contract, judge tag and settings, the configured limits that differ from the
defaults; scoring settings; name, version, metadata).
Its tables and page are taken again from the cache while the fingerprint holds.

What a folder stat cannot see is a file rewritten in place under the same name (`cp` over an
existing archive). `sforge grade` checks every archive by its own stat and hashes such an
archive again; whichever listing hashed it anew then touches evals/<task>/
(Pipeline._rewritten), which marks the task changed whether or not its new bytes need
grading. A `touch` of the archive's folder
does the same (the only way for a sidecar, or a result, edited in place).
A folder modified within RACY_NS of the scan could change again unseen, so such a task gets
no fingerprint (it is recomputed).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sforge.benchmark.images import ImageRef
from sforge.benchmark.model import Benchmark, Task
from sforge.grading.results import key_head

RACY_NS = 2_000_000_000  # as HashCache: a folder this fresh is not trusted to stay put


def _sources(root: Path) -> list[tuple[str, str]]:
    """(source, folder) of each source under a submission root, as discover lists them."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted((e.name, e.path) for e in entries
                  if not e.name.startswith(".") and e.is_dir())


def _stat(path: str, now: int) -> str | None:
    """A folder's identity; None when it changed too recently to be trusted."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "-"
    if now - max(st.st_mtime_ns, st.st_ctime_ns) <= RACY_NS:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def task_definition(bench: Benchmark, task: Task, judge: ImageRef | None, *,
                    limits: dict[str, Any]) -> str:
    """Everything of a task (not of its folders) that its tables and page depend on;
    `limits` as its eval keys hold them (sforge.grading.contract.key_limits)."""
    keyed = key_head(judge.tag, task.judge_settings(), limits=limits) if judge else None
    return json.dumps([keyed, task.name,
                       task.version, task.category, task.score.direction, task.score.rescale,
                       sorted(task.metadata.items(), key=str), bench.excluded(task)],
                      sort_keys=True, default=str)


def fingerprints(bench: Benchmark, judges: dict[str, ImageRef], roots: Iterable[Path],
                 evals: Path, head: str, ids: Iterable[str] | None = None, *,
                 limits: dict[str, Any]) -> dict[str, str | None]:
    """task → fingerprint of its folders and definition (None: a folder is too fresh).
    `head` holds what every task depends on (sforge version, budgets); `limits` the
    configuration's limits as the eval keys hold them."""
    now = time.time_ns()
    sources = [s for root in roots for s in _sources(Path(root))]
    out: dict[str, str | None] = {}
    for task_id in (ids if ids is not None else bench.tasks):
        task = bench.tasks[task_id]
        stats = [_stat(os.path.join(folder, task_id), now) for _, folder in sources]
        stats.append(_stat(os.path.join(evals, task_id), now))
        if None in stats:
            out[task_id] = None
            continue
        text = "\0".join([head, task_definition(bench, task, judges.get(task_id),
                                                 limits=limits),
                          *(f"{name}={st}" for (name, _), st in zip(sources, stats[:-1],
                                                                     strict=True)),
                          f"evals={stats[-1]}"])
        out[task_id] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return out


__all__ = ["RACY_NS", "fingerprints", "task_definition"]
