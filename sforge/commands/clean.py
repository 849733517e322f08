"""What nothing refers to any more, and removing it (`sforge clean`).

Every product is named by a content hash, so an edit leaves the old one behind instead of
overwriting it: images under old tags, their sentinels and build logs, eval results under
keys that no archive or judge setting asks for now. "Referenced" is decided by the same
Pipeline that plans builds and grading, so clean can never remove what a build or a grade
would use. The same holds for experiments (every archive under experiments/: `sforge eval
--timeout`, the probes, no-op and references of `sforge check --integrity`): their archives
stay, and so do their results and logs while the task's current judge and settings, as
loaded or with the timeout the result records, give their key (the same eval again would
find them). A claim
stays while its holder may still finish, and history/ is never touched. A task that fails
to load is left alone entirely: its current hashes are unknown, so nothing of it can be
shown to be unreferenced.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sforge.benchmark.layout import IMAGE_KINDS
from sforge.benchmark.submissions import ARCHIVE_SUFFIXES, split_archive_name
from sforge.containers.engine import ContainerEngine
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.core.fileio import loads_json, read_bytes
from sforge.grading.claims import read_claim, stale_reason
from sforge.grading.contract import judged_task
from sforge.plan.pipeline import Pipeline

KEY = re.compile(r"^([0-9a-f]{20})(?:\.|$)")
DIGEST = re.compile(r"^[0-9a-f]{12}$")
TEMP = re.compile(r"^\..+\.(tmp|part)$|^\.incoming\.")
TEMP_AGE_S = 3600  # a temporary file younger than this may belong to a running write
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Garbage:
    """One thing `sforge clean` would remove: its kind, tag or path, why, and its size."""
    kind: str  # image, sentinel, build log, result, archive, temp file
    what: str  # a tag or a path
    why: str
    size: int = 0


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _broken_names(pipe: Pipeline) -> set[str]:
    return {str(t) for t in (getattr(e, "task", None) for e in pipe.bench.errors) if t}


def _current_digests(pipe: Pipeline) -> dict[tuple[str, str], str]:
    """(kind, name) → the digest its files hash to now."""
    out = {("base", n): r.digest for n, r in pipe.bases.items()}
    for task_id, refs in pipe.refs.items():
        for kind, ref in refs.items():
            out[(kind, task_id)] = ref.digest
    return out


def _unreferenced_image(pipe, current, broken, kind: str, name: str, digest: str) -> str | None:
    """Why (kind, name, digest) is referenced by nothing, or None when it is (or may be)."""
    if name in broken:
        return None
    now = current.get((kind, name))
    if now is None:
        return f"no {kind} named {name} in the benchmark"
    if now != digest:
        return f"old hash (now {now})"
    return None


def _experiment_key(pipe: Pipeline, task_id: str, archives: dict[str, Path],
                    path: Path) -> str | None:
    """The key of the result file `path` when it is the result of an experiment archive
    (`archives`: by sha256) that grading it again would find now: the key
    `Pipeline.eval_target` gives it under the task's current judge and settings, as loaded
    (`sforge check --integrity`) or with the timeout the result records (`sforge eval
    --timeout`); else None."""
    try:
        data = loads_json(read_bytes(path), bulk=True)
        sha, timeout = data["submission"], data["judge_settings"]["timeout_sec"]
        archive = archives.get(sha) if isinstance(sha, str) else None
        if archive is None:
            return None
        tasks = [pipe.bench.tasks[task_id]]
        if not isinstance(timeout, bool):
            tasks.append(judged_task(tasks[0], timeout))
    except (OSError, ValueError, TypeError, KeyError, RecursionError, SforgeError):
        return None
    keys = {pipe.eval_target(task_id, sha, archive, task).key for task in tasks}
    return path.stem if path.stem in keys else None


def _experiment_keys(pipe: Pipeline, broken: set[str]) -> set[str]:
    """The keys of the results of every archive under experiments/ (whoever stored it
    there) that are still referenced (`_experiment_key`)."""
    lay = pipe.layout
    archives: dict[str, dict[str, Path]] = {}
    for path in lay.experiments.glob("*/*/*"):
        task, name = path.parent.name, split_archive_name(path.name)
        if task in pipe.bench.tasks and task not in broken and name and SHA256.match(name):
            archives.setdefault(task, {})[name] = path
    keys = set(pipe.evals)
    out = set()
    for task, found in archives.items():
        for path in lay.eval_dir(task).glob("*.json"):
            if path.stem not in keys and KEY.match(path.name):
                key = _experiment_key(pipe, task, found, path)
                if key:
                    out.add(key)
    return out


def _claim_held(path: Path) -> bool:
    """Whether `path` is a grading claim whose holder may still finish."""
    if not path.name.endswith(".claim"):
        return False
    record = read_claim(path)
    return record is not None and stale_reason(path, record) is None


def find_images(pipe: Pipeline, engine: ContainerEngine) -> list[Garbage]:
    """The benchmark's images on the daemon that no current task or result refers to."""
    current, broken = _current_digests(pipe), _broken_names(pipe)
    out = []
    for tag, size in sorted(engine.tags_with_prefix(f"{pipe.bench.name}.").items()):
        repo, _, digest = tag.rpartition(":")
        parts = repo.split(".")
        if len(parts) != 3 or parts[0] != pipe.bench.name or parts[1] not in IMAGE_KINDS \
                or not DIGEST.match(digest):
            continue  # not a name sforge gives
        why = _unreferenced_image(pipe, current, broken, parts[1], parts[2], digest)
        if why:
            out.append(Garbage("image", tag, why, size))
    return out


def find_files(pipe: Pipeline) -> list[Garbage]:
    """Sentinels, build logs, results and stored archives nothing refers to, and stale
    temporary files of interrupted writes."""
    lay = pipe.layout
    current, broken = _current_digests(pipe), _broken_names(pipe)
    out: list[Garbage] = []

    def add(kind: str, path: Path, why: str) -> None:
        out.append(Garbage(kind, str(path), why, _size(path)))

    for kind in IMAGE_KINDS:
        for sentinel in sorted(lay.sentinels(kind).glob("*/*.json")):
            why = _unreferenced_image(pipe, current, broken, kind, sentinel.parent.name,
                                      sentinel.stem)
            if why:
                add("sentinel", sentinel, why)
        for log in sorted(lay.build_logs(kind).glob("*.log")):
            name, _, digest = log.stem.rpartition("-")
            why = _unreferenced_image(pipe, current, broken, kind, name, digest) \
                if DIGEST.match(digest) else None
            if why:
                add("build log", log, why)

    keys = set(pipe.evals) | _experiment_keys(pipe, broken)
    for task_dir in sorted(p for p in lay.evals.glob("*") if p.is_dir()):
        if task_dir.name in broken:
            continue
        gone = task_dir.name not in pipe.bench.tasks
        for path in sorted(task_dir.iterdir()):
            match = KEY.match(path.name)
            if match and (gone or match.group(1) not in keys) and not _claim_held(path):
                add("result", path, f"no task {task_dir.name}" if gone else
                    "no submission, experiment or judge setting asks for this key")

    for path in sorted([*lay.store.glob("*/*/*"), *lay.experiments.glob("*/*/*")]):
        task = path.parent.name
        if task in broken or not path.is_file() or TEMP.match(path.name):
            continue
        stem = split_archive_name(path.name)
        if task not in pipe.bench.tasks and (stem or path.suffix == ".json"):
            add("archive", path, f"stored for task {task}, no longer in the benchmark")
        elif stem is None and path.suffix == ".json" and not any(
                path.with_name(path.stem + s).exists() for s in ARCHIVE_SUFFIXES):
            add("archive", path, "sidecar of an archive that is gone")

    cutoff = time.time() - TEMP_AGE_S
    for path in sorted(lay.root.rglob(".*")):
        if path.is_file() and TEMP.match(path.name) and path.stat().st_mtime < cutoff:
            add("temp file", path, "left by an interrupted write")
    return out


def find_garbage(pipe: Pipeline, engine: ContainerEngine | None) -> tuple[list[Garbage],
                                                                          str | None]:
    """Everything unreferenced; images only when the daemon answers (else the reason)."""
    files = find_files(pipe)
    if engine is None:
        return files, "no container engine"
    try:
        return find_images(pipe, engine) + files, None
    except InfrastructureError as exc:
        return files, str(exc)


def remove(items: list[Garbage], engine: ContainerEngine | None) -> list[tuple[Garbage, str]]:
    """Remove each item; (item, error) for those that could not be removed."""
    failed = []
    for item in items:
        try:
            if item.kind == "image":
                if engine is None:
                    raise InfrastructureError("no container engine")
                engine.remove_tag(item.what)
            else:
                path = Path(item.what)
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        except (OSError, InfrastructureError) as exc:
            failed.append((item, str(exc)))
    return failed
