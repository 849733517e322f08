"""`sforge check --integrity`, the judge image's links: no symlink in cwd that a submitted
file can be written through to a folder outside cwd.

The engine extracts a submission into cwd of the judge container and follows the image's
own symlinks on the way (a member `data/x` under an image link `data -> /judge/data` lands
in /judge/data/x, as root). The archive's own links are the member filter's business; the
image's are checked here, once per judge image, from its export (a container created, never
started).
"""

from __future__ import annotations

import posixpath
import tarfile
from typing import Any

from sforge.benchmark.model import Task
from sforge.check.findings import Finding
from sforge.check.image_files import exported
from sforge.check.streams import member_path
from sforge.containers.engine import ContainerEngine
from sforge.grading.selection import Selection, under

MAX_HOPS = 40  # as the kernel's ELOOP bound


def resolve(path: str, links: dict[str, str]) -> str | None:
    """`path` with every symlink of `links` (image path → target) in it followed, as the
    container would; None for a loop."""
    parts = [p for p in path.split("/") if p]
    done, hops = "/", 0
    while parts:
        here = posixpath.join(done, parts.pop(0))
        target = links.get(here)
        if target is None:
            done = here
            continue
        hops += 1
        if hops > MAX_HOPS:
            return None
        joined = target if target.startswith("/") else posixpath.join(done, target)
        parts = [p for p in posixpath.normpath(joined).split("/") if p] + parts
        done = "/"
    return posixpath.normpath(done)


def reachable(task: Task, rel: str) -> bool:
    """A submitted file can land below cwd-relative `rel` ([submission] paths reach it,
    exclude leaves it)."""
    selection = Selection(task.submission)
    lands = [f"{rel}/x"] + [q for p in task.submission.paths
                            if (q := posixpath.normpath(p.strip())) != rel and under(q, rel)]
    return any(selection.reason(q) is None for q in lands)


def link_findings(stream: Any, task: Task) -> list[Finding]:
    """The judge image's symlinks in cwd through which a submitted file would be written
    outside cwd, read from `stream` (the image's export, an uncompressed tar stream)."""
    cwd = posixpath.normpath(task.environment.cwd)
    links: dict[str, str] = {}
    dirs: set[str] = {"/"}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            path = "/" + member_path(m.name)
            if m.issym():
                links[path] = m.linkname
            elif m.isdir():
                dirs.add(posixpath.normpath(path))
    dockerfile = task.dir / "judge" / "Dockerfile"
    out: list[Finding] = []
    for path, target in sorted(links.items()):
        if not under(path, cwd) or path == cwd:
            continue
        rel = posixpath.relpath(path, cwd)
        resolved = resolve(path, links)
        if resolved is None or under(resolved, cwd) or resolved not in dirs:
            continue  # inside cwd, a file (replaced, never written through), or a loop
        if not reachable(task, rel):
            continue
        out.append(Finding(dockerfile, None, "integrity-link",
                           f"the judge image has {path} -> {target} in cwd: a submitted "
                           f"{rel}/<file> is written through it to {resolved}/<file>, "
                           "outside cwd, as root (the engine follows the image's links "
                           "when it extracts); remove the link from the judge image, or "
                           "leave it out of [submission] paths (exclude)"))
    return out


def judge_link_findings(engine: ContainerEngine, task: Task, judge_tag: str) -> list[Finding]:
    """link_findings of the judge image `judge_tag`, read through the engine's export."""
    with exported(engine, judge_tag, task.id) as stream:
        return link_findings(stream, task)


__all__ = ["judge_link_findings", "link_findings", "resolve"]
