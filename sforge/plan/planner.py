"""What to build and why, and what to grade: the one answer for `sforge plan`, `list`,
`build`, `verify`, the judge service and the Snakefile's targets.

An image needs nothing when its sentinel exists and its tag is in the daemon or the
registry. A missing sentinel whose tag is present is only recorded (no build); anything
else is built. Presence is asked in one place (`presence`): one image listing of the
daemon, then registry manifest checks for what the daemon lacks.

Stale sentinels (image gone from both) are dropped by `verify_sentinels`, which the CLI
runs before planning and `sforge verify` runs for plain `snakemake` users; parsing the
Snakefile never touches the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sforge.benchmark.images import ImageRef
from sforge.containers.docker import engine
from sforge.containers.engine import ContainerEngine, RegistryError
from sforge.core.config import defaults
from sforge.core.console import warn
from sforge.core.errors import InfrastructureError
from sforge.core.fileio import read_json
from sforge.plan.pipeline import Pipeline


@dataclass
class Presence:
    """Which tags the daemon and the registry hold. `local` is None when the daemon could
    not be asked (then nothing is known, `error` says why)."""
    local: set[str] | None
    remote: set[str] = field(default_factory=set)
    error: str | None = None

    @property
    def known(self) -> bool:
        """Whether the daemon could be asked."""
        return self.local is not None

    def has(self, ref: ImageRef) -> bool:
        """Whether the daemon or the registry holds `ref`'s tag."""
        return ref.tag in (self.local or ()) or ref.tag in self.remote


_UNREACHABLE: set[str] = set()  # optional registries that did not answer in this process


def registry_presence(pipe: Pipeline, eng: ContainerEngine, refs: list[ImageRef]) -> set[str]:
    """Tags of `refs` that the registry holds (manifest checks, no pull).

    A registry named by --registry/SFORGE_REGISTRY must answer; one that only comes from
    benchmark.toml (often unreachable from a workstation) is skipped with a warning.
    """
    if not pipe.registry or not refs or pipe.registry in _UNREACHABLE:
        return set()
    try:
        return {r.tag for r in refs if eng.registry_has(pipe.remote(r))}
    except RegistryError as exc:
        if pipe.registry_explicit:
            raise
        _UNREACHABLE.add(pipe.registry)  # asked once per process, said once
        warn(f"{exc}; building without the registry {pipe.registry} (set SFORGE_REGISTRY "
             "or --registry to require it)", key=f"registry-unreachable:{pipe.registry}")
        return set()


def presence(pipe: Pipeline, refs: list[ImageRef], *, eng: ContainerEngine | None = None,
             tolerate_daemon: bool = False) -> Presence:
    """The one presence check: the daemon (one image listing), then the registry for what
    the daemon lacks. With `tolerate_daemon`, an unreachable daemon gives an unknown
    Presence instead of an InfrastructureError (for plan and list)."""
    eng = eng or engine()
    try:
        local = eng.existing_tags(r.tag for r in refs)
    except InfrastructureError as exc:
        if not tolerate_daemon:
            raise
        return Presence(None, error=str(exc))
    return Presence(local, registry_presence(pipe, eng, [r for r in refs if r.tag not in local]))


def drop_stale_sentinels(pipe: Pipeline, refs: list[ImageRef], found: Presence) -> list[Path]:
    """A sentinel must never lie: drop those whose image is gone from the daemon and the
    registry, so they rebuild."""
    dropped = []
    for ref in refs:
        path = pipe.sentinel(ref)
        if not found.has(ref) and path.exists():
            path.unlink()
            dropped.append(path)
    return dropped


def verify_sentinels(pipe: Pipeline, refs: list[ImageRef] | None = None) -> list[Path]:
    """Drop sentinels whose image is gone (before planning); → the dropped paths."""
    refs = pipe.images(None) if refs is None else refs
    return drop_stale_sentinels(pipe, refs, presence(pipe, refs))


@dataclass(frozen=True)
class Decision:
    """What a build would do with one image ref, and why."""
    ref: ImageRef
    action: str  # "build" | "record" (present under its tag: write the sentinel) | "none"
    reason: str


def plan_images(pipe: Pipeline, refs: list[ImageRef], found: Presence, force: bool = False
                ) -> list[Decision]:
    """A decision for every ref: what a build would do with it, and why."""
    out = []
    for ref in refs:
        sentinel = pipe.sentinel(ref)
        where = "" if ref.tag in (found.local or ()) else " (in the registry)"
        if force:
            out.append(Decision(ref, "build", "forced"))
        elif not sentinel.exists():
            older = sorted(p.stem for p in sentinel.parent.glob("*.json")) \
                if sentinel.parent.is_dir() else []
            if found.has(ref):
                out.append(Decision(ref, "record", f"present under its tag, no build{where}"))
            elif older:
                out.append(Decision(ref, "build", f"new hash (was {', '.join(older[-3:])})"))
            else:
                out.append(Decision(ref, "build", "never built"))
        elif found.known and not found.has(ref):
            gone = "the daemon and the registry" if pipe.registry else "the daemon"
            out.append(Decision(ref, "build", f"image missing from {gone}"))
        else:
            out.append(Decision(ref, "none", "up to date"))
    return out


def docker_builds(config: dict[str, Any]) -> int:
    """Image builds at once, on every path (CLI fast path, Snakemake, profiles)."""
    return int(config.get("docker_builds") or defaults()["docker_builds"])


# grading ------------------------------------------------------------------------------
@dataclass
class GradePlan:
    """What grading would do: submissions, result files needed, pending, re-grades."""
    submissions: int          # submissions of the selected tasks
    results: list[Path]       # distinct result files they need
    pending: list[Path]       # of those, not graded yet
    regrade: int              # pending results of an archive graded before under another key


def plan_grading(pipe: Pipeline, ids: list[str] | None = None) -> GradePlan:
    """What grading would do: the result files missing, and how many of them re-grade an
    archive that has a result under an older key (judge image, settings or grading
    contract changed)."""
    records = pipe.records(ids)
    results = sorted({p for _, p in records})
    pending = [p for p in results if not p.exists()]
    regrade = 0
    if pending:
        wanted: dict[Path, set[str]] = {p.parent: set() for p in pending}
        current = set(results)
        by_path = {p: s.sha256 for s, p in records}
        for folder in wanted:
            for old in folder.glob("*.json") if folder.is_dir() else ():
                if old in current:
                    continue
                try:
                    wanted[folder].add(read_json(old).get("submission"))
                except (OSError, ValueError, AttributeError):
                    continue
        regrade = sum(1 for p in pending if by_path[p] in wanted[p.parent])
    return GradePlan(len(records), results, pending, regrade)
