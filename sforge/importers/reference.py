"""The reference archive of an imported task: its own solution run in its work image
(sforge.build.solution), stored under the benchmark's submissions as source "reference"."""

from __future__ import annotations

from pathlib import Path

from sforge.build.solution import make_reference
from sforge.commands.images import build_images
from sforge.containers.docker import engine as shared_engine
from sforge.core.errors import SforgeError

SOURCE = "reference"


def reference_path(bench_root: Path, task_id: str) -> Path:
    """Where an imported task's reference archive goes in the benchmark."""
    return bench_root / "submissions" / SOURCE / task_id / f"{SOURCE}.tar.gz"


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
