"""Context rules: what a Dockerfile's build can see, and COPY/ADD sources that are outside it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sforge.benchmark.dockerfile import Instruction, copy_args
from sforge.check.findings import Finding

SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules"}

@dataclass
class CheckContext:
    """What a Dockerfile's build can see: root, and the visible top-level names (None: all)."""
    root: Path
    visible: tuple[str, ...] | None
    blobs: tuple[str, ...] = ()
    base: str | None = None          # the task's [environment] base
    is_task: bool = False



def context_files(ctx: CheckContext) -> Iterator[Path]:
    """Every file the build of `ctx` can see."""
    tops = [ctx.root / v for v in ctx.visible] if ctx.visible is not None else [ctx.root]
    for top in tops:
        if top.is_file():
            yield top
        elif top.is_dir():
            yield from (p for p in walk_files(top) if p.is_file())


def check_copy(path: Path, ins: Instruction, ctx: CheckContext, add) -> list[str]:
    """Findings for a COPY/ADD's sources outside the build context; → the sources as written."""
    args = copy_args(ins)
    if args is None or any(f.startswith("--from") for f in args.flags):
        return []
    sources = []
    for src in args.sources:
        if re.match(r"^[a-z][a-z0-9+.-]*://", src):
            if ins.keyword == "ADD":
                add(Finding(path, ins.line, "add-url",
                            f"ADD {src}: a download at build time is not pinned; put the data "
                            "in git or in a blob", "warning"))
            continue
        rel = PurePosixPath(src.lstrip("/"))
        norm = PurePosixPath(*[p for p in rel.parts if p != "."]) if rel.parts else rel
        sources.append(str(norm))
        if "$" in src or not norm.parts:
            continue
        top = norm.parts[0]
        if ctx.visible is not None and top != ".." and not has_glob(top) \
                and top not in ctx.visible:
            seen = " and ".join(f"{v}/" for v in ctx.visible)
            add(Finding(path, ins.line, "build-context",
                        f"{ins.keyword} {src}: this build sees only {seen} of the task "
                        "directory"))
            continue
        if ".." in norm.parts:
            add(Finding(path, ins.line, "build-context",
                        f"{ins.keyword} {src}: a path outside the build context"))
            continue
        if has_glob(str(norm)):
            if not list(ctx.root.glob(str(norm))):
                add(Finding(path, ins.line, "build-context",
                            f"{ins.keyword} {src}: matches nothing in the build context"))
            continue
        declared_blob = any(str(norm) == b or b.startswith(f"{norm}/") for b in ctx.blobs)
        if not (ctx.root / norm).exists() and not declared_blob:
            add(Finding(path, ins.line, "build-context",
                        f"{ins.keyword} {src}: no such file in the build context"))
    return sources


def has_glob(text: str) -> bool:
    """Whether `text` holds a glob character (*, ?, [)."""
    return any(c in text for c in "*?[")


# ------------------------------------------------------------------------------- files

def walk_files(top: Path) -> Iterator[Path]:
    """Every path under `top`, sorted, without following links or entering SKIP_DIRS."""
    for p in sorted(top.iterdir()):
        if p.is_dir() and not p.is_symlink():
            if p.name not in SKIP_DIRS:
                yield p
                yield from walk_files(p)
        else:
            yield p


def is_dockerfile(p: Path) -> bool:
    """A Dockerfile by name: Dockerfile, Dockerfile.*, *.Dockerfile."""
    return p.is_file() and (p.name == "Dockerfile" or p.name.startswith("Dockerfile.")
                            or p.name.endswith(".Dockerfile"))

