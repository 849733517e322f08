"""Building one image target: blobs verified, a filtered context, a hash-stamped sentinel.

The work build sees only environment/, the judge build environment/ and judge/: every
byte a build can see is hashed, and the work image can never copy the hidden tests.
"""

from __future__ import annotations

import os
import sys
import tarfile
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import IO

from sforge.benchmark.blobs import ensure_blob
from sforge.benchmark.dockerfile import (
    copy_args,
    heredoc_uses,
    judge_image_uses,
    parse_dockerfile,
)
from sforge.benchmark.images import BASE_ARG, CONTEXT_DIRS, WORK_ARG, ImageRef, context_blobs
from sforge.containers.engine import ContainerEngine
from sforge.core.clock import now_iso
from sforge.core.errors import BuildFailed, InfrastructureError, SforgeError
from sforge.core.fileio import atomic_write_json, read_json
from sforge.plan.pipeline import Pipeline
from sforge.plan.planner import Presence, presence

LOG_TAIL = 25


def _refused(ref: ImageRef, message: str, log: Path | None = None,
             tail: list[str] | None = None) -> BuildFailed:
    return BuildFailed(message, label=f"{ref.label} ({ref.tag})", log=log, tail=tail)


def _top(source: str) -> str:
    """First component of a context path: `./judge/x` → `judge`."""
    parts = [p for p in source.split("/") if p not in ("", ".")]
    return parts[0] if parts else ""


def judge_leaks(dockerfile: Path) -> list[str]:
    """COPY/ADD instructions of a work Dockerfile that reach into judge/ (hidden tests),
    in shell or JSON form, as `file:line: instruction`."""
    found = []
    for ins in parse_dockerfile(dockerfile.read_text(errors="replace")):
        if ins.keyword not in ("COPY", "ADD"):
            continue
        args = copy_args(ins)
        if args and any(_top(s) == "judge" for s in args.sources):
            found.append(f"{dockerfile}:{ins.line}: {ins.keyword} {ins.text.strip()}")
    return found


def _refuse_judge_images(ref: ImageRef, dockerfile: Path, engine: ContainerEngine) -> None:
    """A work or base build must not read a judge image (FROM, COPY --from, RUN --mount):
    by name, or by a digest, id or other tag the daemon knows for one."""
    uses = judge_image_uses(dockerfile, engine.image_tags)
    if uses:
        raise _refused(ref, f"a {ref.kind} image must not read a judge image (the "
                              "hidden grader and tests would leak):\n  " + "\n  ".join(
                                  f"{dockerfile}:{line}: {msg}" for line, msg in uses))


def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    """Fixed owner and mtime, so the context is the same on any clone."""
    info = tar.gettarinfo(str(path), arcname=arcname)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    if info.isreg():
        with path.open("rb") as fh:
            tar.addfile(info, fh)
    else:
        tar.addfile(info)


def build_context(root: Path, dirs: tuple[str, ...] | None) -> IO[bytes]:
    """A tar of `dirs` under `root` (all of `root` for None) in a spooled temporary file."""
    fh = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 (returned open)
    tops = [root / d for d in dirs] if dirs is not None else [root]
    with tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top in tops:
            if not top.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames.sort()
                here = Path(dirpath)
                if here != root:
                    _add(tar, here, here.relative_to(root).as_posix())
                links = [d for d in dirnames if (here / d).is_symlink()]
                for name in sorted(filenames) + links:
                    _add(tar, here / name, (here / name).relative_to(root).as_posix())
    fh.seek(0)
    return fh


def _record(ref: ImageRef, log: Path, **fields) -> dict:
    return {"tag": ref.tag, "kind": ref.kind, "name": ref.name, "digest": ref.digest,
            "log": str(log) if log.exists() else None, **fields}


def ensure_local(pipe: Pipeline, engine: ContainerEngine, ref: ImageRef) -> None:
    """Pull an image the daemon lacks from the registry (bases before a build, judges
    before grading); an infrastructure error when neither has it."""
    if engine.image_id(ref.tag) is not None:
        return
    if not pipe.registry:
        raise InfrastructureError(f"{ref.label}: image {ref.tag} is not in the Docker daemon "
                                  "and no registry is configured")
    engine.pull(pipe.remote(ref), ref.tag)


def push_image(pipe: Pipeline, engine: ContainerEngine, ref: ImageRef) -> bool:
    """Push under the content tag unless the registry has it; True when pushed."""
    if not pipe.registry:
        raise SforgeError("no registry to push to (use --registry, SFORGE_REGISTRY or "
                          "registry in benchmark.toml)")
    if engine.registry_has(pipe.remote(ref)):
        return False
    ensure_local(pipe, engine, ref)
    engine.push(ref.tag, pipe.remote(ref))
    return True


def make_image(pipe: Pipeline, engine: ContainerEngine, ref: ImageRef, *, force: bool = False,
               push: bool = False, found: Presence | None = None,
               progress: IO[str] | None = None) -> dict:
    """Make the sentinel of `ref`: reuse an image already under its tag (in the daemon or the
    registry; `found` when the caller has asked already), else build it; with `push`, push
    what is built. Flags are arguments: a long-running caller shares one Pipeline."""
    sentinel = pipe.sentinel(ref)
    log = pipe.layout.build_log(ref.kind, ref.name, ref.digest)
    if not force:
        found = found if found is not None and found.known else presence(pipe, [ref], eng=engine)
        if ref.tag in (found.local or ()):
            record = _record(ref, log, image_id=engine.image_id(ref.tag) or "", reused=True,
                             built_at=None, recorded_at=now_iso())
            if push:
                record["pushed"] = push_image(pipe, engine, ref)
            atomic_write_json(sentinel, record)
            return record
        if ref.tag in found.remote:
            record = _record(ref, log, image_id=None, reused=True, built_at=None,
                             registry=pipe.remote(ref), recorded_at=now_iso())
            atomic_write_json(sentinel, record)
            return record
    record = _build(pipe, engine, ref, log, progress or sys.stderr)
    if push:
        engine.push(ref.tag, pipe.remote(ref))
        record["pushed"] = True
    atomic_write_json(sentinel, record)
    return record


def _build(pipe: Pipeline, engine: ContainerEngine, ref: ImageRef, log: Path,
           progress: IO[str]) -> dict:
    if ref.kind == "base":
        root, dirs, dockerfile, platform = pipe.bench.bases[ref.name], None, "Dockerfile", None
        buildargs: dict[str, str] = {}
    else:
        task = pipe.bench.tasks[ref.name]
        root, dirs = task.dir, CONTEXT_DIRS.get(ref.kind)
        dockerfile = f"{'environment' if ref.kind == 'work' else 'judge'}/Dockerfile"
        platform = task.environment.platform
        buildargs = {BASE_ARG: ref.base.tag} if ref.base else {}
        if ref.work:
            buildargs[WORK_ARG] = ref.work.tag
        if ref.kind == "work":
            leaks = judge_leaks(task.dir / "environment" / "Dockerfile")
            if leaks:
                raise _refused(ref, "the work image cannot see judge/ (its build context "
                                      "is environment/ only, so hidden tests never leak):\n  "
                                      + "\n  ".join(leaks))
        for blob in context_blobs(task, ref.kind):
            ensure_blob(pipe.bench, task, blob, pipe.cache)
        pipe.cache.save()
        for dep in ref.deps:
            ensure_local(pipe, engine, dep)
    if ref.kind in ("work", "base"):
        _refuse_judge_images(ref, root / dockerfile, engine)
    heredocs = heredoc_uses(root / dockerfile)
    if heredocs:
        raise _refused(ref, "here-documents cannot be built here:\n  " + "\n  ".join(
            f"{root / dockerfile}:{line}: {msg}" for line, msg in heredocs))
    log.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=LOG_TAIL)
    started = time.monotonic()
    context = build_context(root, dirs)
    with log.open("w") as log_fh:
        def on_line(line: str) -> None:
            log_fh.write(line + "\n")
            tail.append(line)
            if line.startswith("Step ") or line.startswith("ERROR"):
                print(f"  [{ref.kind} {ref.name}] {line}", file=progress, flush=True)

        try:
            image_id = engine.build(context, dockerfile, ref.tag, buildargs, platform, on_line)
        except BuildFailed as exc:
            hint = ""
            if "judge" in str(exc) and ref.kind == "work":
                hint = " (the work build sees only environment/)"
            raise _refused(ref, f"build failed: {exc}{hint}", log, list(tail)) from None
        finally:
            context.close()
    return _record(ref, log, image_id=image_id, built_at=now_iso(), reused=False,
                   build_seconds=round(time.monotonic() - started, 3))


def read_sentinel(path: Path) -> dict | None:
    """A sentinel's record; None when it is missing or unreadable (then it is made again)."""
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None
