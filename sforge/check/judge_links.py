"""`sforge check --integrity`, the judge image's links: no symlink in cwd that a submitted
file can be written through to a folder outside cwd.

The engine extracts a submission into cwd of the judge container and follows the image's
own symlinks on the way (a member `data/x` under an image link `data -> /judge/data` lands
in /judge/data/x, as root). The archive's own links are the member filter's business; the
image's are checked here, once per judge image, from its export (a container created, never
started).
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import tarfile
from pathlib import Path
from typing import Any

from sforge.benchmark.model import Task
from sforge.check.findings import Finding
from sforge.check.image_files import exported
from sforge.check.streams import member_path
from sforge.containers.engine import ContainerEngine
from sforge.core.fileio import atomic_write_json, read_json
from sforge.grading.selection import Selection, under

MAX_HOPS = 40  # as the kernel's ELOOP bound
VERSION = "1"  # of what the cache holds


def resolve(path: str, links: dict[str, str]) -> str | None:
    """`path` with every symlink of `links` (image path → target) followed component by
    component, as the kernel does (`..` after a link climbs from where the link led);
    None for a loop."""
    parts = path.split("/")
    done, hops = "/", 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            done = posixpath.dirname(done)
            continue
        here = posixpath.join(done, part)
        target = links.get(here)
        if target is None:
            done = here
            continue
        hops += 1
        if hops > MAX_HOPS:
            return None
        parts = target.split("/") + parts
        if target.startswith("/"):
            done = "/"
    return done


def escaping_links(stream: Any, cwd: str) -> list[tuple[str, str, str]]:
    """(path, target, where it leads) of every symlink in `cwd` of the exported image
    (`stream`: an uncompressed tar stream) that leads to a folder outside cwd."""
    cwd = posixpath.normpath(cwd)
    links: dict[str, str] = {}
    dirs: set[str] = {"/"}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            path = "/" + member_path(m.name)
            if m.issym():
                links[path] = m.linkname
            elif m.isdir():
                dirs.add(posixpath.normpath(path))
    out = []
    real_cwd = resolve(cwd, links)
    if real_cwd is not None and real_cwd != cwd:  # cwd itself a link: everything goes there
        out.append((cwd, links.get(cwd, real_cwd), real_cwd))
    for path, target in sorted(links.items()):
        if not under(path, cwd) or path == cwd:
            continue
        resolved = resolve(path, links)
        if resolved is not None and not under(resolved, cwd) and resolved in dirs:
            out.append((path, target, resolved))  # not a file (replaced), a loop or inside
    return out


def link_findings(escaping: list[tuple[str, str, str]], task: Task) -> list[Finding]:
    """The findings of the judge image's `escaping` links (escaping_links) that a submitted
    file can reach."""
    cwd = posixpath.normpath(task.environment.cwd)
    dockerfile = task.dir / "judge" / "Dockerfile"
    selection = Selection(task.submission)
    out: list[Finding] = []
    for path, target, resolved in escaping:
        if path == cwd:  # what lies in the folder it leads to is the grader's to know
            out.append(Finding(dockerfile, None, "integrity-link",
                               f"cwd {cwd} is a link in the judge image (to {target}): every "
                               f"submitted file lands in {resolved}; keep the grader's files "
                               "out of it, or make cwd a plain folder", "warning"))
            continue
        rel = posixpath.relpath(path, cwd)
        if not selection.reaches(rel):
            continue
        out.append(Finding(dockerfile, None, "integrity-link",
                           f"the judge image has {path} -> {target} in cwd: a submitted "
                           f"{rel}/<file> is written through it to {resolved}/<file>, "
                           "outside cwd, as root (the engine follows the image's links "
                           "when it extracts); remove the link from the judge image, or "
                           "leave it out of [submission] paths (exclude)"))
    return out


def judge_link_findings(engine: ContainerEngine, task: Task, judge_tag: str,
                        cache: Path | None = None) -> list[Finding]:
    """link_findings of the judge image `judge_tag`, read through the engine's export once
    per image id and cwd (kept under `cache`: an image id names its content)."""
    image_id = engine.image_id(judge_tag)
    key = hashlib.sha256(f"{VERSION}\0{image_id}\0{task.environment.cwd}".encode()
                         ).hexdigest()[:32]
    path = cache / f"{key}.json" if cache is not None and image_id else None
    escaping: list[tuple[str, str, str]] | None = None
    if path is not None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            escaping = [(str(a), str(b), str(c)) for a, b, c in read_json(path)]
    if escaping is None:
        with exported(engine, judge_tag, task.id) as stream:
            escaping = escaping_links(stream, task.environment.cwd)
        if path is not None:
            with contextlib.suppress(OSError):  # a read-only tree: read again next time
                atomic_write_json(path, escaping)
    return link_findings(escaping, task)


__all__ = ["escaping_links", "judge_link_findings", "link_findings", "resolve"]
