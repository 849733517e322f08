"""Everything the DAG needs, computed once per process from config: the loaded benchmark,
image refs and their sentinels, submissions and their eval keys.

The Snakefile, the CLI's fast paths and `sforge plan` all read these same targets, so
there is one truth about what exists and what must be made. It makes no Docker calls:
cluster jobs re-parse the Snakefile and must stay cheap.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sforge import __version__
from sforge.benchmark.hashing import FolderHashCache, HashCache
from sforge.benchmark.images import ImageRef, base_ref, task_refs
from sforge.benchmark.layout import Layout
from sforge.benchmark.loader import load_benchmark, load_benchmark_name
from sforge.benchmark.model import Benchmark, Task
from sforge.benchmark.submissions import RecordRow, Submission, discover_rows
from sforge.grading.contract import key_limits
from sforge.grading.results import eval_key, eval_keyer


@dataclass(frozen=True)
class EvalTarget:
    """One eval to make: its key, task, archive and judge image, and the task as graded."""
    key: str
    task: str
    sha256: str
    archive: Path
    judge: ImageRef
    spec: Task  # the task as graded (its judge settings are part of the key)


@dataclass
class Pipeline:
    """The loaded benchmark, its image refs and submissions, and every path, once per process."""
    config: dict[str, Any]
    bench: Benchmark
    layout: Layout
    cache: HashCache
    bases: dict[str, ImageRef] = field(default_factory=dict)
    refs: dict[str, dict[str, ImageRef]] = field(default_factory=dict)
    _found: list[RecordRow] | None = None
    _submissions: list[Submission] | None = None
    _rows: dict[frozenset[str], list[RecordRow]] = field(default_factory=dict)
    _records: dict[frozenset[str], list[tuple[Submission, Path]]] = field(default_factory=dict)

    # construction ---------------------------------------------------------------
    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Pipeline:
        """Load the benchmark of `config` and hash every image ref (no Docker call)."""
        bench_dir = resolve(config["benchmark"])
        name = load_benchmark_name(bench_dir)
        layout = Layout.for_benchmark(resolve(config["results"]), name)
        cache = HashCache(layout.cache / "hashes.json", salt=__version__)
        bench = load_benchmark(bench_dir, cache)
        pipe = cls(config, bench, layout, cache)
        for name in bench.bases:
            pipe.bases[name] = base_ref(bench, name, cache)
        for task in bench.tasks.values():
            pipe.refs[task.id] = task_refs(bench, task, cache, pipe.bases)
        cache.save()
        return pipe

    # selection ------------------------------------------------------------------
    def tasks(self, ids: list[str] | None = None) -> list[Task]:
        """The selected tasks: `ids`, else config's `tasks`, else all; an unknown id is an error."""
        return self.bench.require(ids if ids is not None else self.config.get("tasks"))

    def images(self, ids: list[str] | None = None, kinds=("base", "work", "judge")
               ) -> list[ImageRef]:
        """Refs to build for the selected tasks, bases first, each once. Asking for judges
        brings the work images they are built FROM (grading needs those too)."""
        tasks = self.tasks(ids)
        out: list[ImageRef] = []
        if "base" in kinds:
            used = sorted({t.environment.base for t in tasks if t.environment.base})
            out += [self.bases[b] for b in used]
        for t in tasks:
            refs = self.refs[t.id]
            if "work" in kinds or ("judge" in kinds and refs["judge"].work):
                out.append(refs["work"])
            if "judge" in kinds:
                out.append(refs["judge"])
        return out

    def sentinel(self, ref: ImageRef) -> Path:
        """The sentinel path of `ref`."""
        return self.layout.sentinel(ref.kind, ref.name, ref.digest)

    @property
    def registry(self) -> str | None:
        """--registry, else SFORGE_REGISTRY (both in config), else benchmark.toml."""
        value = self.config.get("registry") or self.bench.registry
        return value.rstrip("/") if value else None

    @property
    def registry_explicit(self) -> bool:
        """Whether --registry or SFORGE_REGISTRY named the registry (then it must answer)."""
        return bool(self.config.get("registry"))

    def remote(self, ref: ImageRef) -> str:
        """The name of `ref` in the registry."""
        return f"{self.registry}/{ref.tag}"

    def ref_for(self, kind: str, name: str) -> ImageRef:
        """The ref of a base by name, or of a task's work or judge image."""
        return self.bases[name] if kind == "base" else self.refs[name][kind]

    # grading --------------------------------------------------------------------
    @property
    def submissions_dir(self) -> Path:
        """The batch submissions directory: config's `submissions`, else <benchmark>/submissions."""
        configured = self.config.get("submissions")
        return resolve(configured) if configured else self.bench.root / "submissions"

    @functools.cached_property
    def archive_hashes(self) -> FolderHashCache:
        """sha256 of submission archives, kept apart from the task files' hashes (planning
        and building load those every time) and by folder (a task's archives load alone)."""
        return FolderHashCache(self.layout.cache / "archives")

    def found(self) -> list[RecordRow]:
        """The submissions of the benchmark's tasks, as plain rows (no result paths)."""
        if self._found is None:
            found = discover_rows([self.submissions_dir, self.layout.store],
                                  self.archive_hashes, on_rewritten=self._rewritten)
            self.archive_hashes.save()
            self._found = [f for f in found if f.task in self.bench.tasks]
        return self._found

    def _rewritten(self, task: str) -> None:
        """An archive of `task` was rewritten in place: its folder's stat is as it was, so
        the report's folder fingerprints would miss it when its new bytes' result is there
        already (nothing graded, nothing written). Whichever listing hashed it anew touches
        the task's result folder, sforge's own, so the next report redoes the task."""
        if task in self.bench.tasks:
            folder = self.layout.eval_result(task, "-").parent
            with contextlib.suppress(OSError):
                folder.mkdir(parents=True, exist_ok=True)
                os.utime(folder)

    def submissions(self) -> list[Submission]:
        """Every submission of the benchmark's tasks, listed once per process."""
        if self._submissions is None:
            self._submissions = [f.submission() for f in self.found()]
        return self._submissions

    @functools.cached_property
    def key_limits(self) -> dict[str, Any]:
        """The configuration's limits as every eval key of this pipeline holds them
        (sforge.grading.contract.key_limits: {} at the defaults)."""
        return key_limits(self.config)

    def eval_target(self, task_id: str, sha256: str, archive: Path,
                    task: Task | None = None) -> EvalTarget:
        """`task` overrides the loaded one (e.g. another timeout); the key follows it, and
        the configuration's limits."""
        task = task or self.bench.tasks[task_id]
        judge = self.refs[task_id]["judge"]
        key = eval_key(judge.tag, sha256, task.judge_settings(), limits=self.key_limits)
        return EvalTarget(key, task_id, sha256, archive, judge, task)

    @functools.cached_property
    def evals(self) -> dict[str, EvalTarget]:
        """Eval targets by key; identical archives from several sources share one."""
        out: dict[str, EvalTarget] = {}
        for sub in sorted(self.submissions(), key=lambda s: str(s.path)):
            target = self.eval_target(sub.task, sub.sha256, sub.path)
            out.setdefault(target.key, target)
        return out

    def eval_path(self, target: EvalTarget) -> Path:
        """The result file of `target`."""
        return self.layout.eval_result(target.task, target.key)

    def record_rows(self, ids: list[str] | None = None) -> list[RecordRow]:
        """Each submission of the selected tasks with the result file that grades it, as
        the tables take them (computed once per selection: 100,000 eval keys are not free).
        Before all submissions are known, only the selected tasks' folders are listed, and
        the keys are made in the workers that list them."""
        wanted = frozenset(t.id for t in self.tasks(ids))
        if wanted not in self._rows:
            # eval_target's key and eval_path's path, made per task (100,000 records)
            keyers = {t: eval_keyer(self.refs[t]["judge"].tag,
                                    self.bench.tasks[t].judge_settings(),
                                    limits=self.key_limits) for t in wanted}
            folders = {t: os.fspath(self.layout.eval_result(t, "-").parent) for t in wanted}

            def result_of(task: str, sha256: str) -> str:
                keyer = keyers.get(task)
                return f"{folders[task]}/{keyer(sha256)}.json" if keyer is not None else ""

            if self._found is not None:
                rows = [r._replace(result=result_of(r.task, r.sha256))
                        for r in self._found if r.task in wanted]
            else:
                every = len(wanted) == len(self.bench.tasks)
                rows = discover_rows([self.submissions_dir, self.layout.store],
                                     self.archive_hashes, None if every else set(wanted),
                                     result_of, self._rewritten)
                self.archive_hashes.save()
                rows = [r for r in rows if r.task in wanted]
                if every:  # all submissions are known now (found() ignores the results)
                    self._found = rows
            self._rows[wanted] = rows
        return self._rows[wanted]

    def records(self, ids: list[str] | None = None) -> list[tuple[Submission, Path]]:
        """record_rows as (submission, result path) pairs."""
        wanted = frozenset(t.id for t in self.tasks(ids))
        if wanted not in self._records:
            self._records[wanted] = [(r.submission(), Path(r.result))
                                     for r in self.record_rows(ids)]
        return self._records[wanted]


def resolve(path: str | Path) -> Path:
    """Relative paths are taken from the working directory, as a user typing them means."""
    return Path(path).expanduser().resolve()


_CACHE: dict[str, Pipeline] = {}
# Run flags steer what is done, not what is planned: they are arguments of the functions
# that act, and never part of (or read back from) a cached Pipeline.
RUN_FLAGS = ("force", "push")


def get_pipeline(config: dict[str, Any]) -> Pipeline:
    """One Pipeline per process and configuration (run flags aside): the CLI and the
    Snakefile it runs share it, and `pipe.config` is always the caller's settings."""
    key = json.dumps({k: v for k, v in config.items() if k not in RUN_FLAGS},
                     sort_keys=True, default=str)
    if key not in _CACHE:
        _CACHE[key] = Pipeline.from_config({k: v for k, v in config.items()
                                            if k not in RUN_FLAGS})
    return _CACHE[key]


__all__ = ["EvalTarget", "Pipeline", "get_pipeline", "resolve"]
