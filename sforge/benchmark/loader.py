"""Load benchmark.toml and every task.toml into the model, collecting per-task errors.

One broken task never hides the others: its DefinitionError lands in Benchmark.errors
and the good tasks load as usual.
"""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from sforge.benchmark import rescaling as rescale_mod
from sforge.benchmark.hashing import HashCache
from sforge.benchmark.house_rules import house_rules
from sforge.benchmark.model import (
    METADATA_KINDS,
    Benchmark,
    Blob,
    Environment,
    Judge,
    Reference,
    Score,
    SubmissionRules,
    Task,
)
from sforge.core import validated
from sforge.core.config import PACKAGE_DIR
from sforge.core.errors import DefinitionError, NotUtf8
from sforge.core.fileio import read_utf8
from sforge.core.units import parse_memory

if TYPE_CHECKING:
    import jsonschema

SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Keys of task.toml that sforge reads; any other top-level key is free-form metadata.
KNOWN_KEYS = {"id", "name", "version", "environment", "submission", "judge", "score", "blobs",
              "game", "reference"}


@functools.cache
def _schema_text(name: str) -> str:
    # The package's own file on disk (sforge always runs from files: its workflow does);
    # importlib.resources would cost an eval's path more than the read.
    return (PACKAGE_DIR / name).read_text()


@functools.cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    # Imported here: only a changed document is validated (HashCache.parsed keeps task.toml
    # files, sforge.core.validated what passed before), so a no-op build skips the import.
    import jsonschema
    import yaml

    schema = yaml.safe_load(_schema_text(name))
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def _schema_error(path: Path, data: dict[str, Any], schema: str, task: str | None) -> None:
    key = validated.digest(_schema_text(schema), data)
    if validated.seen(key):
        return
    errors = sorted(_validator(schema).iter_errors(data), key=lambda e: list(e.absolute_path))
    if not errors:
        validated.remember(key)
        return
    err = errors[0]
    # blobs[0].sha256, as the loader's own checks name array items
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                    for p in err.absolute_path).lstrip(".") or None
    if err.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        name = missing[0] if missing else "?"
        field = f"{field}.{name}" if field else name
        message = "is required"
    elif err.validator == "additionalProperties":
        message = f"{err.message} (check the spelling)"
    elif err.validator == "pattern" and field in ("id", "environment.base", "name"):
        message = (f"{err.instance!r} is not a valid name: lowercase letters, digits, '_', '.', "
                   "'-' (it becomes part of a Docker image name)")
    else:
        message = err.message
    raise DefinitionError(path, field, message, task)


def _read_toml(path: Path, task: str | None) -> dict[str, Any]:
    try:
        return tomllib.loads(read_utf8(path))
    except FileNotFoundError:
        raise DefinitionError(path, None, "file not found", task) from None
    except NotUtf8 as exc:
        raise DefinitionError(path, None, exc.reason, task, line=exc.line) from None
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError(path, None, f"not valid TOML: {exc}", task,
                              line=_toml_error_line(exc)) from None


def _toml_error_line(exc: tomllib.TOMLDecodeError) -> int | None:
    """The line of a TOML syntax error: its `lineno` (Python 3.14+), else the "(at line N,
    column M)" its message ends with; None at the end of the document."""
    line = getattr(exc, "lineno", None)
    if isinstance(line, int):
        return line
    m = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
    return int(m.group(1)) if m else None


def _check_memory(path: Path, field: str, value: str | None, task: str) -> None:
    if value is None:
        return
    try:
        parse_memory(value)
    except ValueError as exc:
        raise DefinitionError(path, field, str(exc), task) from None


def _blob(path: Path, task_dir: Path, index: int, raw: dict[str, Any], task: str) -> Blob:
    field = f"blobs[{index}]"
    rel = PurePosixPath(raw["path"])
    if rel.is_absolute() or ".." in rel.parts or str(rel) in (".", ""):
        raise DefinitionError(path, f"{field}.path",
                              f"{raw['path']!r} must be a relative path inside the task directory",
                              task)
    if len(rel.parts) < 2 or rel.parts[0] not in ("environment", "judge"):
        raise DefinitionError(path, f"{field}.path",
                              f"{raw['path']!r} must lie under environment/ or judge/, where a "
                              "build can see it", task)
    sha = raw["sha256"]
    if not SHA256.match(sha):
        raise DefinitionError(path, f"{field}.sha256",
                              f"expected 64 lowercase hex digits, got {sha!r}", task)
    return Blob(path=str(rel), sha256=sha)


def _reference(path: Path, task_dir: Path, raw: dict[str, Any] | None,
               task: str) -> Reference | None:
    if raw is None:
        return None
    kind, value = next(iter(raw.items()))
    rel = PurePosixPath(value)
    field = f"reference.{kind}"
    if rel.is_absolute() or ".." in rel.parts or str(rel) in (".", ""):
        raise DefinitionError(path, field, f"{value!r} must be a relative path inside the "
                              "task directory", task)
    if not (task_dir / rel).is_file():
        raise DefinitionError(path, field, f"{value!r}: no such file in the task directory",
                              task)
    if kind == "archive" and not str(rel).endswith((".tar", ".tar.gz", ".tgz")):
        raise DefinitionError(path, field, f"{value!r}: expected a .tar, .tar.gz or .tgz "
                              "archive of the working directory", task)
    return Reference(**{kind: str(rel)})


def _parse_task_toml(path: Path) -> dict[str, Any]:
    """TOML parse plus schema check: the costly, file-local part, cacheable by stat."""
    task_id = path.parent.name
    data = _read_toml(path, task_id)
    _schema_error(path, data, "task.schema.yaml", task_id)
    return data


def load_task(task_dir: Path, bases: dict[str, Path], cache: HashCache | None = None) -> Task:
    """Load and validate one task directory; raises DefinitionError."""
    task_id = task_dir.name
    path = task_dir / "task.toml"
    if cache is not None and path.is_file():
        data = cache.parsed(path, _parse_task_toml)
    else:
        data = _parse_task_toml(path)
    if data["id"] != task_id:
        raise DefinitionError(path, "id", f"{data['id']!r} must match the directory name "
                              f"{task_id!r}", task_id)
    env_raw = data.get("environment", {})
    base = env_raw.get("base")
    if base is not None and base not in bases:
        known = ", ".join(sorted(bases)) or "none"
        raise DefinitionError(path, "environment.base",
                              f"unknown base {base!r}: no bases/{base}/Dockerfile "
                              f"(bases found: {known})", task_id)
    for sub in ("environment", "judge"):
        if not (task_dir / sub / "Dockerfile").is_file():
            raise DefinitionError(task_dir / sub / "Dockerfile", None,
                                  f"missing: every task needs {sub}/Dockerfile", task_id)
    _check_memory(path, "environment.memory", env_raw.get("memory"), task_id)
    judge_raw = data["judge"]
    _check_memory(path, "judge.memory", judge_raw.get("memory"), task_id)
    score_raw = data.get("score", {})
    table = score_raw.get("rescale")
    if table is not None:
        try:
            rescale_mod.validate(table)
        except rescale_mod.RescaleError as exc:
            field = "score.rescale" + (f".{exc.param}" if exc.param else "")
            raise DefinitionError(path, field, str(exc), task_id) from None
    blobs = tuple(_blob(path, task_dir, i, b, task_id)
                  for i, b in enumerate(data.get("blobs", [])))
    if len({b.path for b in blobs}) != len(blobs):
        raise DefinitionError(path, "blobs", "two blobs share one path", task_id)

    environment = Environment(**env_raw)
    # The judge inherits the work container's limits unless it states its own.
    # Defaults are Judge's own (model.py): one place for each.
    inherited = {k: v for k, v in (("cpus", environment.cpus),
                                   ("memory", environment.memory)) if v is not None}
    judge = Judge(**{**inherited, **{k: v for k, v in judge_raw.items()
                                     if k in ("cmd", "timeout_sec", "internet", "cpus",
                                              "memory")}})
    sub_raw = data.get("submission", {})
    return Task(
        id=task_id,
        dir=task_dir,
        name=data.get("name", task_id),
        version=data.get("version", "0.0.0"),
        environment=environment,
        submission=SubmissionRules(paths=tuple(sub_raw.get("paths", ["."])),
                                   exclude=tuple(sub_raw.get("exclude", [])),
                                   keep_metadata=tuple(sub_raw.get("keep_metadata",
                                                                   METADATA_KINDS))),
        judge=judge,
        score=Score(direction=score_raw.get("direction", "maximize"), rescale=table),
        blobs=blobs,
        game=data.get("game"),
        reference=_reference(path, task_dir, data.get("reference"), task_id),
        metadata={k: v for k, v in data.items() if k not in KNOWN_KEYS},
    )


def load_benchmark(root: Path | str, cache: HashCache | None = None) -> Benchmark:
    """Load a benchmark directory. Raises DefinitionError only for benchmark-level faults."""
    root = Path(root)
    data = _benchmark_toml(root)
    bases_dir = root / "bases"
    bases = {}
    if bases_dir.is_dir():
        bases = {d.name: d for d in sorted(bases_dir.iterdir()) if (d / "Dockerfile").is_file()}
    bench = Benchmark(root=root.resolve(), name=data["name"], registry=data.get("registry"),
                      blob_url=data.get("blob_url"), bases=bases,
                      exclude_status=tuple(data.get("leaderboard", {}).get("exclude_status",
                                                                           ())),
                      house_rules=house_rules(root / "benchmark.toml", data),
                      canary=data.get("canary"))
    tasks_dir = root / "tasks"
    if not tasks_dir.is_dir():
        raise DefinitionError(tasks_dir, None, "missing: a benchmark keeps its tasks in tasks/")
    bench.warnings += tasks_dir_warnings(root)
    for task_dir in sorted(tasks_dir.iterdir()):
        if not task_dir.is_dir() or task_dir.name.startswith("."):
            continue
        try:
            task = load_task(task_dir, bases, cache)
        except DefinitionError as exc:
            bench.errors.append(exc)
        else:
            bench.tasks[task.id] = task
    return bench


def tasks_dir_warnings(root: Path) -> list[str]:
    """A benchmark whose tasks/ holds no task directory is almost always a wrong -b path or
    a checkout without its tasks: say so instead of listing, planning and checking nothing."""
    tasks_dir = Path(root) / "tasks"
    if tasks_dir.is_dir() and not any(d.is_dir() and not d.name.startswith(".")
                                      for d in tasks_dir.iterdir()):
        return [f"{tasks_dir}: no task directories (is -b/--benchmark the right directory?)"]
    return []


def require_benchmark_dir(root: Path) -> None:
    """A benchmark directory that does not exist is a DefinitionError, the same for every
    command (`sforge check` too: it names no benchmark whose rules could be checked)."""
    if not root.is_dir():
        raise DefinitionError(root, None, "benchmark directory not found (set -b/--benchmark "
                              "or SFORGE_BENCHMARK)")


def _benchmark_toml(root: Path) -> dict[str, Any]:
    require_benchmark_dir(root)
    path = root / "benchmark.toml"
    data = _read_toml(path, None)
    _schema_error(path, data, "benchmark.schema.yaml", None)
    return data


def load_benchmark_name(root: Path) -> str:
    """Just the name (it places the results and the caches), with the same checks."""
    return _benchmark_toml(root)["name"]
