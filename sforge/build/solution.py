"""A task's reference solution run in its work image: the script (e.g. solution/solve.sh)
copied in, run in cwd as its author wrote it, then the working directory packed with its
metadata (modes, numeric owners, ACLs, xattrs) into a .tar.gz of what `[submission]` selects,
as the agent's sforge-submit packs it. `sforge import` stores it as a
reference submission, `sforge check --integrity` grades it."""

from __future__ import annotations

import contextlib
import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from sforge.containers.engine import ContainerSpec, EngineError, ExtractConflict
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.grading.submission_pack import pack_selected

if TYPE_CHECKING:
    from sforge.containers.engine import ContainerEngine

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


def solution_tar(task_dir: Path, script: str) -> bytes:
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
    as a .tar.gz at `out`, as sforge-submit would pack it there (only what `[submission]`
    selects; sforge.grading.submission_pack). Raises SforgeError when the solution fails."""
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
        engine.put_archive(cid, "/", solution_tar(task.dir, script))
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
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar, \
                pack_selected(tar, task.submission) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except tarfile.TarError as exc:
        tmp.unlink(missing_ok=True)
        raise SforgeError(f"{task.id}: the packed working directory is not readable: "
                          f"{exc}") from None
    tmp.replace(out)
    return out
