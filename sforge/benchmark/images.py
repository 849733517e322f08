"""Image names and content-hash tags (the README, "Images and tags").

<name>.base.<base>:<h>  over bases/<base>/
<name>.work.<id>:<h>    over environment/ and the base tag
<name>.judge.<id>:<h>   over environment/, judge/ and the base tag

A judge Dockerfile may start `ARG WORK_IMAGE` / `FROM ${WORK_IMAGE}`: sforge then builds the work
image first and passes its tag. The judge's hash already covers environment/ and the base tag
(everything the work tag hashes), so what invalidates a judge stays the same; only the order
changes: such a judge waits for its work image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sforge.benchmark.hashing import HashCache, digest, tree_entries
from sforge.benchmark.model import Benchmark, Task

# What each kind of task image's build context holds (and so what its hash covers).
CONTEXT_DIRS = {"work": ("environment",), "judge": ("environment", "judge")}
BASE_ARG = "BASE_IMAGE"
WORK_ARG = "WORK_IMAGE"
_FROM_WORK = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*\$\{?" + WORK_ARG + r"\}?(\s|$)",
                        re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class ImageRef:
    """One image: its kind, name, content digest and repository, and what it is built from."""
    kind: str      # base | work | judge
    name: str      # base name or task id
    digest: str    # 12 hex
    repo: str      # <bench>.<kind>.<name>
    base: ImageRef | None = None
    work: ImageRef | None = None  # a judge built FROM ${WORK_IMAGE}: its work image

    @property
    def deps(self) -> list[ImageRef]:
        """The images this one is built from, which must exist before its build."""
        return [r for r in (self.base, self.work) if r is not None]

    @property
    def tag(self) -> str:
        """The content tag, `<bench>.<kind>.<name>:<digest>`."""
        return f"{self.repo}:{self.digest}"

    @property
    def label(self) -> str:
        """How messages name the image: "<kind> <name>"."""
        return f"{self.kind} {self.name}"


def base_ref(bench: Benchmark, base: str, cache: HashCache) -> ImageRef:
    """The ref of a base image, hashed over every file under bases/<base>/."""
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
    refs: dict[str, ImageRef] = {}
    for kind, dirs in CONTEXT_DIRS.items():
        entries = [line for sub in dirs for line in per_dir[sub]]
        work = refs["work"] if kind == "judge" and judge_from_work(task, cache) else None
        refs[kind] = ImageRef(kind, task.id, digest([*entries, base_line]),
                              f"{bench.name}.{kind}.{task.id}", base, work)
    return refs


def _mentions_work_image(path: Path) -> bool:
    return bool(_FROM_WORK.search(path.read_text(errors="replace")))


def judge_from_work(task: Task, cache: HashCache | None = None) -> bool:
    """Does the judge Dockerfile start FROM ${WORK_IMAGE} (then it is built after the work
    image, with WORK_IMAGE set to its tag)? Memoized by the file's stat in `cache`."""
    path = task.dir / "judge" / "Dockerfile"
    if not path.is_file():
        return False
    if cache is None:
        return _mentions_work_image(path)
    return bool(cache.parsed(path, _mentions_work_image))


def context_blobs(task: Task, kind: str) -> list:
    """The task's blobs that the `kind` build can see."""
    return [b for b in task.blobs if Path(b.path).parts[0] in CONTEXT_DIRS[kind]]
