"""Image names and content-hash tags (spec: Images and Bases).

<name>.base.<base>:<h>  over bases/<base>/
<name>.work.<id>:<h>    over environment/ and the base tag
<name>.judge.<id>:<h>   over environment/, judge/ and the base tag
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .hashing import HashCache, digest, tree_entries
from .model import Benchmark, Task

# What each kind of task image's build context holds (and so what its hash covers).
CONTEXT_DIRS = {"work": ("environment",), "judge": ("environment", "judge")}


@dataclass(frozen=True)
class ImageRef:
    kind: str      # base | work | judge
    name: str      # base name or task id
    digest: str    # 12 hex
    repo: str      # <bench>.<kind>.<name>
    base: ImageRef | None = None

    @property
    def tag(self) -> str:
        return f"{self.repo}:{self.digest}"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"


def base_ref(bench: Benchmark, base: str, cache: HashCache) -> ImageRef:
    entries = tree_entries(bench.bases[base], ".", {}, cache)
    return ImageRef("base", base, digest(entries), f"{bench.name}.base.{base}")


def task_refs(bench: Benchmark, task: Task, cache: HashCache,
              bases: dict[str, ImageRef]) -> dict[str, ImageRef]:
    """The work and judge refs of one task; `bases` memoizes base refs across tasks."""
    base = None
    if task.environment.base:
        base = bases.get(task.environment.base)
        if base is None:
            base = bases[task.environment.base] = base_ref(bench, task.environment.base, cache)
    blobs = {b.path: b.sha256 for b in task.blobs}
    per_dir = {}
    for sub in ("environment", "judge"):
        mine = {p: s for p, s in blobs.items() if p.startswith(f"{sub}/")}
        per_dir[sub] = tree_entries(task.dir / sub, sub, mine, cache)
    base_line = f"base\0{base.tag if base else ''}"
    refs = {}
    for kind, dirs in CONTEXT_DIRS.items():
        entries = [line for sub in dirs for line in per_dir[sub]]
        refs[kind] = ImageRef(kind, task.id, digest([*entries, base_line]),
                              f"{bench.name}.{kind}.{task.id}", base)
    return refs


def context_blobs(task: Task, kind: str) -> list:
    """The task's blobs that the `kind` build can see."""
    return [b for b in task.blobs if Path(b.path).parts[0] in CONTEXT_DIRS[kind]]
