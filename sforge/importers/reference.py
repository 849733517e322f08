"""The reference archive of an imported task: its own solution run in its work image, the
working directory packed with its metadata (modes, numeric owners, ACLs, xattrs), stored
under the benchmark's submissions as source "reference"."""

from __future__ import annotations

import contextlib
import gzip
import io
import tarfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from sforge.commands.orchestrate import build_images
from sforge.containers.docker import engine as shared_engine
from sforge.containers.engine import ContainerSpec, EngineError, ExtractConflict
from sforge.core.errors import InfrastructureError, SforgeError

if TYPE_CHECKING:
    from sforge.containers.engine import ContainerEngine

SOURCE = "reference"
REFERENCE_TAR = "/tmp/sforge-reference.tar"
DEFAULT_TIMEOUT = 1800.0
_MAX_REFERENCE = 1 << 34  # the packed working directory, read whole into memory
# GNU tar keeps ACLs and xattrs (both the raw xattrs and their text); busybox tar keeps what it
# can (modes, numeric owners).
_PACK = (
    'cd "$1" || exit 97; '
    '{ if command -v bash >/dev/null 2>&1; then bash "$2"; '
    'else sh "$2"; fi; }; st=$?; [ "$st" -eq 0 ] || exit "$st"; '
    "if tar --help 2>/dev/null | grep -q -- --xattrs-include; then "
    f"tar --create --numeric-owner --acls --xattrs --xattrs-include='*' -f {REFERENCE_TAR} .; "
    f"else tar -cf {REFERENCE_TAR} .; fi || exit 98"
)


def reference_path(bench_root: Path, task_id: str) -> Path:
    return bench_root / "submissions" / SOURCE / task_id / f"{SOURCE}.tar.gz"


def _solution_tar(task_dir: Path, script: str) -> bytes:
    """The script's folder (the script alone when it sits in the task directory itself),
    at the same path under / in the container."""
    folder = PurePosixPath(script).parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if str(folder) == ".":
            tar.add(str(task_dir / script), arcname=script)
        else:
            tar.add(str(task_dir / folder), arcname=str(folder))
    return buf.getvalue()


def make_reference(engine: ContainerEngine, work_tag: str, task, out: Path,
                   timeout: float | None = None, script: str = "solution/solve.sh") -> Path:
    """Run `script` (relative to the task directory; its folder is copied to the same path
    under /) of `task` (a loaded sforge Task) in a container of its work image and store cwd
    as a .tar.gz at `out`. Raises SforgeError when the solution fails."""
    if not (task.dir / script).is_file():
        raise SforgeError(f"{task.id}: no {script}")
    cwd = task.environment.cwd
    limit = timeout or DEFAULT_TIMEOUT
    # the solution runs as the task's author wrote it: network, Docker's default capabilities
    spec = ContainerSpec(image=work_tag, command=("/bin/sh", "-c", _PACK, "sforge", cwd,
                                                f"/{script}"),
                         cwd=cwd, env={}, labels={"sforge.import": task.id}, cpus=0, memory=0,
                         network="bridge", init=False, drop_caps=False,
                         no_new_privileges=False, keep_output=True)
    try:
        cid = engine.create_container(spec)
    except InfrastructureError as exc:
        raise InfrastructureError(f"{task.id}: cannot start its work image {work_tag}: "
                                  f"{exc}") from None
    try:
        engine.put_archive(cid, "/", _solution_tar(task.dir, script))
        engine.start(cid)
        code = engine.wait(cid, limit)
        if code is None:
            raise SforgeError(f"{task.id}: the reference solution did not finish within "
                              f"{limit:g} s")
        if code != 0:
            lines = b"".join(engine.output(cid)).decode(errors="replace").splitlines()
            tail = "\n".join(lines[-15:]).strip()
            what = {97: f"cwd {cwd} missing in the work image",
                    98: "packing the working directory failed"}.get(code, f"exit {code}")
            raise SforgeError(f"{task.id}: the reference solution failed ({what})"
                              + (f":\n    {tail}" if tail else ""))
        packed = engine.read_file(cid, REFERENCE_TAR, _MAX_REFERENCE)
        if packed is None or packed.kind != "file":
            raise SforgeError(f"{task.id}: the packed working directory is "
                              + ("missing" if packed is None else packed.kind))
        data = packed.data
    except (EngineError, ExtractConflict) as exc:
        raise InfrastructureError(f"{task.id}: running the reference solution: {exc}") from None
    finally:
        with contextlib.suppress(InfrastructureError):
            engine.remove_container(cid)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as gz:
        gz.write(data)
    tmp.replace(out)
    return out


def make_references(pipe, reports: list, ex) -> None:
    """For each written task with a solution: build its images (the conversion is only done
    when they build) and store its reference archive; problems land on the report."""
    todo = [r for r in reports if r.fits and r.task_id in pipe.bench.tasks]
    for err in pipe.bench.errors:
        for r in reports:
            if r.fits and getattr(err, "task", None) == r.task_id:
                r.reference_problem = f"the written task does not load: {err}"
    if not todo:
        return
    built = build_images(pipe, [r.task_id for r in todo], force=False, push=False, ex=ex)
    failed = {ref.name for ref in built.failed}
    for report in todo:
        task = pipe.bench.tasks[report.task_id]
        if report.task_id in failed:
            log = pipe.layout.build_log
            report.reference_problem = ("its images do not build; see "
                                        f"{log('work', task.id, pipe.refs[task.id]['work'].digest)}"
                                        " and the judge's log beside it")
            continue
        if not (task.dir / "solution" / "solve.sh").is_file():
            report.reference_problem = "the source has no runnable solution"
            continue
        agent_timeout = (task.metadata.get("imported") or {}).get("agent_timeout_sec")
        try:
            path = make_reference(shared_engine(), pipe.refs[task.id]["work"].tag, task,
                                  reference_path(pipe.bench.root, task.id),
                                  timeout=agent_timeout)
        except SforgeError as exc:
            report.reference_problem = str(exc)
        else:
            report.reference = str(path)
