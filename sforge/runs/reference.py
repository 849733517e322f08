"""What the oracle agent gets: the task's `[reference]` (task.toml), copied into the work
container at the same path under / as `sforge check --integrity` runs it, and the env that
tells the agent's command whether to run a script or unpack an archive into cwd."""

from __future__ import annotations

from sforge.benchmark.model import Task
from sforge.build.solution import solution_tar
from sforge.core.errors import SforgeError


def reference_files(task: Task) -> tuple[bytes, dict[str, str]]:
    """(a tar to put at / in the container, the env naming what it holds); a task without
    a usable [reference] is an error naming its task.toml."""
    ref = task.reference
    if ref is None or not (ref.script or ref.archive):
        raise SforgeError(f"{task.toml_path}: [reference]: the oracle agent needs "
                          "`script = \"solution/solve.sh\"` or `archive = \"solution/ref.tar.gz\"`")
    kind, rel = ("script", ref.script) if ref.script else ("archive", ref.archive)
    assert rel is not None
    if not (task.dir / rel).is_file():
        raise SforgeError(f"{task.toml_path}: [reference] {kind} = {rel!r}: no such file")
    return solution_tar(task.dir, rel), {"SFORGE_REFERENCE_KIND": kind,
                                         "SFORGE_REFERENCE": f"/{rel}"}
