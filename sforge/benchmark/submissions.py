"""Submission archives: the batch directory <submissions>/<source>/<task>/<name>.tar.gz
(with an optional sidecar <name>.json) and the store that `sforge eval` fills: there an
archive is named by its sha256, and its sidecar's `filename` keeps the name it was uploaded
under, which the tables and the report show (shown_name)."""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from sforge.benchmark.hashing import FolderHashCache, HashCache
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_json, create_temp, loads_json, read_bytes
from sforge.core.forking import fork_map

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
SIDECAR_FIELDS = ("submitted_at", "elapsed_s", "agent", "model", "filename")
SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")


def check_source(source: str) -> str:
    """A source names one folder of the store (and a row of the tables): never a path, never
    hidden, never empty, so an archive lands where grade and the report read."""
    if not SOURCE_NAME.fullmatch(source):
        raise SforgeError(f"source {source!r}: use letters, digits, '_', '.', '-' (at most 255, "
                          "starting with a letter or digit)")
    return source


@dataclass(frozen=True)
class Submission:
    """One submission archive, with its sidecar's metadata."""
    source: str        # who submitted: a run id, an agent, or "manual"
    task: str
    name: str          # archive file name without its suffix
    path: Path
    sha256: str
    submitted_at: str | None = None  # ISO 8601
    elapsed_s: float | None = None   # agent time when it was submitted (for time budgets)
    agent: str | None = None
    model: str | None = None


class RecordRow(NamedTuple):
    """A submission with the path of the result file that grades it, as the tables take
    them (sforge.scores): plain strings and numbers (a Submission with its Path costs 3× as
    much to make, and 10× to send back from a worker process)."""
    source: str
    task: str
    name: str
    sha256: str
    submitted_at: str | None
    elapsed_s: float | None
    agent: str | None
    model: str | None
    result: str  # the result file's path ("" when not asked for)
    archive: str

    def submission(self) -> Submission:
        """The row as a Submission."""
        return Submission(self.source, self.task, self.name, Path(self.archive), self.sha256,
                          self.submitted_at, self.elapsed_s, self.agent, self.model)


def record_rows(records: Iterable[tuple[Submission, Path | str]]) -> list[RecordRow]:
    """(submission, result path) pairs as RecordRows."""
    return [RecordRow(s.source, s.task, s.name, s.sha256, s.submitted_at, s.elapsed_s,
                      s.agent, s.model, os.fspath(p), os.fspath(s.path)) for s, p in records]


def split_archive_name(filename: str) -> str | None:
    """'run1.tar.gz' → 'run1'; None when the file is not an archive by name."""
    for suffix in ARCHIVE_SUFFIXES:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            return filename[: -len(suffix)]
    return None


def _sidecar(path: Path | str) -> dict[str, Any]:
    """The sidecar's fields; a bad sidecar is a warning naming the file (its archive is still
    graded, without that metadata): one agent's bad file must not stop everyone's grading."""
    try:
        data = loads_json(read_bytes(path), bulk=True)  # one per archive
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        return _bad_sidecar(path, f"not valid JSON: {str(exc)[:200]}")
    if not isinstance(data, dict):
        return _bad_sidecar(path, f"expected a JSON object with {', '.join(SIDECAR_FIELDS)}")
    out = {k: data.get(k) for k in SIDECAR_FIELDS}
    for key in ("submitted_at", "agent", "model", "filename"):
        if out[key] is not None and not isinstance(out[key], str):
            log.warning("sforge: warning: %s: [%s] expected a string; ignored", path, key)
            out[key] = None
    elapsed = out["elapsed_s"]
    if elapsed is not None and (not isinstance(elapsed, int | float) or isinstance(elapsed, bool)
                                or not math.isfinite(elapsed) or elapsed < 0):
        log.warning("sforge: warning: %s: [elapsed_s] expected a number of seconds ≥ 0; "
                    "ignored", path)
        out["elapsed_s"] = None
    return out


def shown_name(name: str, filename: object) -> str:
    """The name the tables and the report give an archive: in the store, where `name` is its
    sha256, the file name it was uploaded under (its sidecar's `filename`) with the hash's
    first 12 digits (two uploads of one name stay apart); else `name` itself."""
    if not isinstance(filename, str) or not filename:
        return name
    return f"{filename} · {name[:12]}"


def _bad_sidecar(path: Path | str, why: str) -> dict[str, Any]:
    log.warning("sforge: warning: %s: %s; its archive is graded without this metadata",
                path, why)
    return {}


# Task folders a worker process must have to be worth its start (sforge.core.forking): 100,000
# archives in 1,000 folders are listed on every core.
FOLDERS_PER_PROCESS = 100


def discover(roots: list[Path], cache: HashCache | FolderHashCache,
             tasks: set[str] | None = None) -> list[Submission]:
    """Archives under each root as <source>/<task>/<name>.tar[.gz]; hashes come from the cache.
    `tasks`: only the folders of these tasks."""
    return [f.submission() for f in discover_rows(roots, cache, tasks)]


def discover_rows(roots: list[Path], cache: HashCache | FolderHashCache,
                  tasks: set[str] | None = None,
                  result_of: Callable[[str, str], str] | None = None,
                  on_rewritten: Callable[[str], None] | None = None) -> list[RecordRow]:
    """discover's submissions as rows, in order of their paths; `result_of(task, sha256)`
    names each one's result file (else ""). `on_rewritten(task)` is told of an archive
    whose bytes changed under its name (the listing worker calls it).

    One directory listing per task folder and one stat per archive; names starting with a
    dot are never submissions. Folders are shared out to worker processes, each saving the
    hashes of its own folders (one cache file per folder: no two workers write one)."""
    folders = [item for root in roots if root.is_dir()
               for item in _task_folders(root.resolve(), tasks)]

    def one(item: tuple[str, str, str]) -> list[tuple[str, RecordRow]]:
        found = _folder_rows(*item, cache, result_of, on_rewritten)
        cache.save()
        return found

    found = [f for part in fork_map(one, folders, FOLDERS_PER_PROCESS) for f in part]
    found.sort(key=lambda item: item[0])
    return [f for _, f in found]


def _folder_rows(source: str, task: str, folder: str, cache: HashCache | FolderHashCache,
                 result_of: Callable[[str, str], str] | None = None,
                 on_rewritten: Callable[[str], None] | None = None
                 ) -> list[tuple[str, RecordRow]]:
    """(listed path, row) of each archive in one task folder."""
    try:
        entries = {e.name: e for e in os.scandir(folder) if not e.name.startswith(".")}
    except (NotADirectoryError, FileNotFoundError):
        return []
    out = []
    for filename, entry in entries.items():
        name = split_archive_name(filename)
        if name is None or not entry.is_file() or not _utf8_name(entry.path):
            continue
        path = os.path.realpath(entry.path) if entry.is_symlink() else entry.path
        sidecar = f"{name}.json"
        meta = _sidecar(os.path.join(folder, sidecar)) if sidecar in entries else {}
        try:
            sha = cache.sha256(path, entry.stat())
        except FileNotFoundError:  # removed since the listing
            continue
        if on_rewritten is not None and cache.was_rewritten(path):
            on_rewritten(task)
        out.append((entry.path, RecordRow(
            source, task, shown_name(name, meta.get("filename")), sha,
            meta.get("submitted_at"), meta.get("elapsed_s"),
            meta.get("agent"), meta.get("model"),
            result_of(task, sha) if result_of is not None else "", path)))
    return out


def _utf8_name(path: str) -> bool:
    """Whether a submission's path can be named in the tables and pages (UTF-8); else a
    warning naming it, and it is left out."""
    if path.isascii():
        return True
    try:
        path.encode()
    except UnicodeEncodeError:
        log.warning("sforge: warning: %r: not a UTF-8 name; left out of the submissions "
                    "(rename it)", os.fsencode(path))
        return False
    return True


def _task_folders(root: Path, tasks: set[str] | None = None) -> list[tuple[str, str, str]]:
    """(source, task, folder) of every <root>/<source>/<task>/ (a linked folder resolved),
    of the given tasks only when `tasks` is set."""
    out = []
    for source in os.scandir(root):
        if source.name.startswith(".") or not source.is_dir() or not _utf8_name(source.path):
            continue
        if tasks is not None:  # no listing of a source's every task folder
            for name in sorted(tasks):
                path = os.path.join(source.path, name)
                if not name.startswith(".") and os.path.isdir(path):
                    folder = os.path.realpath(path) if os.path.islink(path) \
                        or source.is_symlink() else path
                    out.append((source.name, name, folder))
            continue
        for task in os.scandir(source.path):
            if task.name.startswith(".") or not task.is_dir() or not _utf8_name(task.path):
                continue
            folder = os.path.realpath(task.path) if task.is_symlink() or source.is_symlink() \
                else task.path
            out.append((source.name, task.name, folder))
    return out


def store_archive(store: Path, source: str, task: str, src: IO[bytes],
                  submitted_at: str, meta: dict[str, Any] | None = None,
                  created: list[Path] | None = None) -> Submission:
    """Copy an archive into the store under its sha256 (content-addressed), with a sidecar
    (submitted_at plus `meta`: elapsed_s, agent, model, filename: the name it was uploaded
    under). The first submission's sidecar
    stands: the tables keep one row per distinct archive per source. `created` gets the
    files that were not there before (a caller that then refuses the submission removes
    them)."""
    import hashlib
    import os


    folder = store / check_source(source) / task
    folder.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = create_temp(folder, prefix=".incoming.")
    try:
        with os.fdopen(fd, "wb") as out:
            head = b""
            while chunk := src.read(1 << 20):
                head = head or chunk[:2]
                h.update(chunk)
                out.write(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sha = h.hexdigest()
    suffix = ".tar.gz" if head == b"\x1f\x8b" else ".tar"
    path = folder / f"{sha}{suffix}"
    if created is not None and not path.exists():
        created.append(path)
    tmp.replace(path)
    sidecar = path.with_name(f"{sha}.json")
    extra = {k: v for k, v in (meta or {}).items() if k in SIDECAR_FIELDS and v is not None}
    if not sidecar.exists():  # the first submission time stands
        atomic_write_json(sidecar, {"submitted_at": submitted_at, **extra})
        if created is not None:
            created.append(sidecar)
    return Submission(source=source, task=task, name=sha, path=path.resolve(), sha256=sha,
                      submitted_at=submitted_at, **{k: extra.get(k) for k in
                                                    ("elapsed_s", "agent", "model")})
