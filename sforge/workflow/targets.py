"""The functions Snakemake rules call, one per rule; the CLI's fast paths call the same ones.

No business logic lives in .smk files and none is written twice between CLI and rules: each
function here checks that the rule's paths are the ones the layers below write, and calls them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from sforge.benchmark.blobs import ensure_blob
from sforge.benchmark.images import context_blobs
from sforge.build.image import make_image
from sforge.containers.docker import engine
from sforge.core.errors import SforgeError
from sforge.core.joblog import job_log
from sforge.evals.grade import grade, judge_runtime_min
from sforge.grading.results import EvalResult
from sforge.plan.pipeline import Pipeline
from sforge.plan.planner import Presence
from sforge.report.update import STEPS, task_fingerprints, update_products

# The evaluate rule's wall clock on a cluster (its cores and memory: sforge.grading.capacity).
__all__ = ["blob_paths", "fetch_blob_target", "grade_target", "judge_runtime_min",
           "make_image_target", "logged_job", "report_target"]


def _same_log(log: str | Path | None, expected: Path) -> None:
    """The build and the judge write their own logs (streamed as they run); the rule's
    `log:` names that very file, from the same Layout method."""
    if log is not None and Path(log).resolve() != expected.resolve():
        raise SforgeError(f"the rule's log {log} is not where this job writes it ({expected})")


# rule base_image, task_image ---------------------------------------------------------
def make_image_target(pipe: Pipeline, output: Path | str, *, force: bool = False,
                      push: bool = False, found: Presence | None = None,
                      log: str | Path | None = None) -> dict:
    """Make the image whose sentinel is `output` (a path of Layout.sentinel). Run flags are
    arguments, never read from the (shared, cached) pipeline."""
    kind, name, digest = pipe.layout.sentinel_parts(output)
    _same_log(log, pipe.layout.build_log(kind, name, digest))
    ref = pipe.ref_for(kind, name)
    if ref.digest != digest:
        raise SforgeError(f"{kind} {name}: asked for hash {digest} but its files now hash to "
                          f"{ref.digest}; the benchmark changed while planning, run again")
    return make_image(pipe, engine(), ref, force=force, push=push, found=found)


# rule evaluate -----------------------------------------------------------------------
def grade_target(pipe: Pipeline, output: Path | str, log: str | Path | None = None
                 ) -> EvalResult:
    """Grade the archive whose result file is `output` (a path of Layout.eval_result)."""
    _, key = pipe.layout.eval_parts(output)
    target = pipe.evals.get(key)
    if target is None:
        raise SforgeError(f"no submission has eval key {key}")
    _same_log(log, pipe.layout.eval_log(target.task, key))
    return grade(pipe, target)


# rule blob ---------------------------------------------------------------------------
def blob_paths(pipe: Pipeline, task_id: str, kind: str) -> list[Path]:
    """The blobs an image of the task is built with (the task_image rule's inputs)."""
    task = pipe.bench.tasks[task_id]
    return [task.dir / b.path for b in context_blobs(task, kind)]


def fetch_blob_target(pipe: Pipeline, output: Path | str, log: str | Path | None = None
                      ) -> Path:
    """Fetch the declared blob at `output` (a path inside a task directory)."""
    wanted = Path(output).resolve()
    found = [(task, b) for task in pipe.bench.tasks.values() for b in task.blobs
             if (task.dir / b.path).resolve() == wanted]
    if not found:
        raise SforgeError(f"{output}: not a declared blob of any task")
    task, blob = found[0]
    with job_log(log, f"blob {task.id}/{blob.path}"):
        present = (task.dir / blob.path).is_file()
        path = ensure_blob(pipe.bench, task, blob, pipe.cache)
        pipe.cache.save()
        logging.getLogger("sforge.benchmark.blobs").info(
            "%s %s (sha256 %s)", "verified" if present else "fetched and verified", path,
            blob.sha256)
    return path


# rule report -------------------------------------------------------------------------
def report_target(pipe: Pipeline, outputs: Sequence[str | Path],
                  logs: Sequence[str | Path] = ()) -> int:
    """The tables and pages (`outputs`: their paths), made as `sforge report` makes them
    (sforge.report.update); `logs`: the step logs it writes. → tasks computed again."""
    lay = pipe.layout
    made = {Path(p).resolve() for p in (lay.scores, lay.best, lay.leaderboard,
                                        lay.leaderboard_md, lay.budgets, lay.report,
                                        lay.report_pages)}
    wrong = [str(p) for p in outputs if Path(p).resolve() not in made]
    if wrong:
        raise SforgeError(f"the rule's outputs {', '.join(wrong)} are not the tables and "
                          "pages this job writes")
    for log in logs:
        if Path(log).resolve() not in {lay.step_log(s).resolve() for s in STEPS}:
            raise SforgeError(f"the rule's log {log} is not a log this job writes")
    return update_products(pipe, task_fingerprints(pipe))


# rule doctor_node --------------------------------------------------------------------
def logged_job(log: str | Path | None, what: str, job: Callable[..., object],
               *args: object) -> None:
    """Run `job(*args)` recorded in the rule's log: for a rule whose function is a higher
    layer's (the doctor's node check, sforge.commands.doctor.node_report)."""
    with job_log(log, what):
        job(*args)
