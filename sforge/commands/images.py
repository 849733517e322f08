"""What `sforge list`, `plan`, `verify`, `build`, `push` and `pull` do, and the image making
every other command shares: the planner's decisions acted on (stale sentinels dropped,
present images only recorded, the rest built, independent builds without Snakemake)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sforge.benchmark.images import ImageRef
from sforge.build.image import push_image, read_sentinel
from sforge.commands.execution import Execution, run_workflow
from sforge.containers.docker import engine
from sforge.core.console import say
from sforge.core.errors import SforgeError
from sforge.plan.pipeline import Pipeline
from sforge.plan.planner import (
    Decision,
    GradePlan,
    Presence,
    docker_builds,
    drop_stale_sentinels,
    plan_grading,
    plan_images,
    presence,
    verify_sentinels,
)
from sforge.workflow import targets

_STATE = {"none": "built", "record": "record", "build": "build"}


def task_state(states: dict[str, str]) -> str:
    """One task's images in words: what a build would do."""
    if any(s == "unknown" for s in states.values()):
        return "unknown (Docker daemon unreachable)"
    if all(s == "built" for s in states.values()):
        return "built"
    words = []
    for action, say_ in (("build", "to build"), ("record", "present, to record")):
        kinds = [k for k, s in states.items() if s == action]
        if kinds:
            words.append(f"{say_}: {', '.join(kinds)}")
    return "; ".join(words)


def task_rows(pipe: Pipeline, ids: list[str] | None) -> tuple[list[dict[str, Any]], Presence]:
    """One row per selected task: id, name, base (None for a task on no base), metadata,
    tags, what a build would do (the planner's decision per image: built, record, build,
    or unknown without a daemon) and whether the leaderboard ranks it."""
    refs = pipe.images(ids)
    found = presence(pipe, refs, tolerate_daemon=True)
    decided = {d.ref: _STATE[d.action] for d in plan_images(pipe, refs, found)}
    rows = []
    for task in pipe.tasks(ids):
        tr = pipe.refs[task.id]
        base = pipe.bases.get(task.environment.base) if task.environment.base else None
        images = {k: r for k, r in (("base", base), ("work", tr["work"]),
                                    ("judge", tr["judge"])) if r}
        states = {k: decided[r] if found.known else "unknown" for k, r in images.items()}
        rows.append({"id": task.id, "name": task.name, "base": task.environment.base or None,
                     "metadata": dict(task.metadata), "work": tr["work"].tag,
                     "judge": tr["judge"].tag, "state": task_state(states),
                     "images": states, "ranked": not pipe.bench.excluded(task)})
    return rows, found


@dataclass
class Plan:
    """What a build would make (and why) and what grading would do."""
    images: list[ImageRef]
    decisions: list[Decision]  # only those that make something
    found: Presence
    grading: GradePlan


def plan(pipe: Pipeline, ids: list[str] | None, force: bool) -> Plan:
    """What `sforge build` and `sforge grade` would do, and why; changes nothing."""
    refs = pipe.images(ids)
    found = presence(pipe, refs, tolerate_daemon=True)
    decisions = [d for d in plan_images(pipe, refs, found, force) if d.action != "none"]
    return Plan(refs, decisions, found, plan_grading(pipe, ids))


def verify(pipe: Pipeline, ids: list[str] | None) -> list[Path]:
    """Drop the sentinels whose image is gone from the daemon and the registry."""
    return verify_sentinels(pipe, pipe.images(ids))


# build / push / pull ------------------------------------------------------------------
@dataclass
class BuildOutcome:
    """The images asked for, those that needed making, and those that failed."""
    refs: list[ImageRef]
    todo: list[ImageRef]
    failed: list[ImageRef]
    reused: int = 0
    pushed: int = 0

    @property
    def made(self) -> list[ImageRef]:
        """The images that were to be made and were made."""
        return [r for r in self.todo if r not in self.failed]


def build_images(pipe: Pipeline, ids: list[str] | None, *, force: bool, push: bool,
                 ex: Execution) -> BuildOutcome:
    """Make the images of the tasks `ids`; with `push`, push every one the registry lacks."""
    refs = pipe.images(ids)
    todo = make_images(pipe, refs, ex, force=force, push=push)
    failed = [r for r in todo if not pipe.sentinel(r).exists()]
    out = BuildOutcome(refs, todo, failed)
    records = [read_sentinel(pipe.sentinel(r)) or {} for r in out.made]
    out.reused = sum(1 for rec in records if rec.get("reused"))
    out.pushed = sum(1 for rec in records if rec.get("pushed"))
    if push and not failed:  # and whatever the registry still lacks
        out.pushed += sum(push_image(pipe, engine(), r) for r in refs)
    return out


def make_images(pipe: Pipeline, refs: list[ImageRef], ex: Execution, *, force: bool = False,
                push: bool = False, quiet: bool = False) -> list[ImageRef]:
    """Make the sentinels of `refs` (build, grade and eval all come here): stale sentinels
    dropped, images already under their tag only recorded (the rule's own function, no DAG),
    the rest built. → the refs that needed making; their sentinels exist when made."""
    found = presence(pipe, refs)
    drop_stale_sentinels(pipe, refs, found)
    decisions = plan_images(pipe, refs, found, force)
    if force:
        for ref in refs:
            pipe.sentinel(ref).unlink(missing_ok=True)
    todo = [d.ref for d in decisions if d.action != "none"]
    for d in decisions:
        if d.action == "record":
            targets.make_image_target(pipe, pipe.sentinel(d.ref), push=push, found=found)
    pending = [r for r in todo if not pipe.sentinel(r).exists()]
    if pending:
        if not quiet:
            say(f"{len(pending)} of {len(refs)} image(s) to build")
        if not ex.profile and all(pipe.sentinel(d).exists()
                                  for r in pending for d in r.deps):
            build_independent(pipe, pending, ex.jobs, force=force, push=push)
        else:  # images that wait on others, or a cluster: the DAG schedules them
            run_workflow(pipe.config, [pipe.sentinel(r) for r in pending], ex, quiet=quiet,
                         force=force, push=push)
    return todo


def build_independent(pipe: Pipeline, refs: list[ImageRef], jobs: int, *, force: bool,
                      push: bool) -> None:
    """Images whose inputs all exist are independent jobs of the DAG: run the rule's own
    function for each, `jobs` at a time but never more than docker_builds, without paying
    Snakemake's ~1.5 s start."""
    from concurrent.futures import ThreadPoolExecutor


    def one(ref: ImageRef) -> None:
        try:
            targets.make_image_target(pipe, pipe.sentinel(ref), force=force, push=push)
        except SforgeError as exc:  # listed with its log tail by the caller
            say(str(exc))

    width = max(1, min(jobs, docker_builds(pipe.config)))
    with ThreadPoolExecutor(max_workers=width) as pool:
        list(pool.map(one, refs))


def push_images(pipe: Pipeline, ids: list[str] | None) -> tuple[list[ImageRef], list[ImageRef]]:
    """→ (refs, those pushed): every image the registry lacks is pushed."""
    refs = pipe.images(ids)
    return refs, [r for r in refs if push_image(pipe, engine(), r)]


def pull_images(pipe: Pipeline, ids: list[str] | None,
                on_pull: Callable[[ImageRef], None]) -> tuple[list[ImageRef], set[str]]:
    """→ (refs, tags already local); each image the daemon lacks is pulled."""
    refs = pipe.images(ids)
    local = engine().existing_tags(r.tag for r in refs)
    if not pipe.registry:
        raise SforgeError("no registry to pull from (use --registry, SFORGE_REGISTRY or "
                          "registry in benchmark.toml)")
    for ref in refs:
        if ref.tag not in local:
            engine().pull(pipe.remote(ref), ref.tag)
            on_pull(ref)
    return refs, local


# judge images for grading -------------------------------------------------------------
def prepare_images(pipe: Pipeline, ids: list[str] | None) -> list[ImageRef]:
    """The base and judge refs grading needs, their sentinels made truthful."""
    refs = pipe.images(ids, kinds=("base", "judge"))
    verify_sentinels(pipe, refs)
    return refs


def ensure_judge(pipe: Pipeline, task_id: str, ex: Execution) -> None:
    """Make the judge image's sentinel (building base and judge first when needed). Images
    already present are only recorded: a first eval into a new results directory (a CI job,
    a new user) starts no Snakemake."""
    refs = pipe.images([task_id], kinds=("base", "judge"))
    make_images(pipe, refs, ex, quiet=True)
    if not all(pipe.sentinel(r).exists() for r in refs):
        raise SforgeError(f"cannot build the judge image of {task_id} "
                          f"(see: sforge build --task {task_id})")
