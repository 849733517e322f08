"""The generated parts of docs/write-a-task.md: the task.toml and benchmark.toml field tables
(from the schemas' `description`s, defaults from the model) and the example task's files (from
docs/first-task/), so that the guide cannot drift from what sforge reads.

`python -m sforge.check.schema_doc` rewrites the doc; `--check` exits 1 when it is stale."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sforge.benchmark.model import Environment, Judge, Score, SubmissionRules
from sforge.core.config import PACKAGE_DIR, REPO_ROOT, safe_yaml

DOC = REPO_ROOT / "docs" / "write-a-task.md"
# A generated block: `<!-- generated: WHAT -->` … `<!-- end generated -->`, WHAT being
# `task.toml`, `benchmark.toml` or `file <path from the repository root>`.
BLOCK = re.compile(r"(<!-- generated: (?P<what>[^>]+?) -->\n)(?P<body>.*?)"
                   r"(<!-- end generated -->)", re.DOTALL)
# Defaults that live in the model's dataclasses, one place for each.
_MODEL = {"environment": Environment, "submission": SubmissionRules, "judge": Judge,
          "score": Score}
_FENCE = {".toml": "toml", ".py": "python", ".md": "markdown", ".sh": "sh"}


@dataclasses.dataclass
class Row:
    """One field of a schema as a row of the guide's field table."""
    field: str
    kind: str
    required: bool
    default: str
    description: str


def _kind(spec: dict[str, Any]) -> str:
    if "enum" in spec:
        return "one of " + ", ".join(f"`{v}`" for v in spec["enum"])
    kind = spec.get("type", "")
    if kind == "array":
        items = spec.get("items", {})
        if "enum" in items:
            return "list of " + ", ".join(f"`{v}`" for v in items["enum"])
        if items.get("type") == "object":
            return "array of tables"
        return f"list of {items.get('type', 'value')}s"
    if kind == "object":
        return "table"
    if kind == "number" and "exclusiveMinimum" in spec:
        return f"number > {spec['exclusiveMinimum']}"
    return str(kind)


def _default(section: str | None, name: str) -> str:
    model = _MODEL.get(section or "")
    for f in dataclasses.fields(model) if model else ():
        if f.name == name:
            value = f.default if f.default is not dataclasses.MISSING else None
            if value is None:
                return ""
            if isinstance(value, tuple):
                return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
            if isinstance(value, bool):
                return f"`{str(value).lower()}`"
            return f'`"{value}"`' if isinstance(value, str) else f"`{value}`"
    return ""


def rows(schema: dict[str, Any], prefix: str = "", section: str | None = None
         ) -> Iterator[Row]:
    """One row per field of `schema`, depth first, in the schema's order."""
    required = set(schema.get("required", ()))
    for name, spec in (schema.get("properties") or {}).items():
        path = f"{prefix}{name}"
        yield Row(path, _kind(spec), name in required, _default(section, name),
                  " ".join(str(spec.get("description", "")).split()))
        if spec.get("type") == "object" and "properties" in spec:
            yield from rows(spec, f"{path}.", section or name)
        extra = spec.get("additionalProperties")
        if isinstance(extra, dict) and extra.get("type") == "object":
            yield from rows(extra, f"{path}.<key>.", section or name)
        items = spec.get("items", {})
        if items.get("type") == "object":
            yield from rows(items, f"{path}[].", section or name)


def table(schema_file: str) -> str:
    """The Markdown field table of one schema file, in the schema's field order."""
    schema = safe_yaml((PACKAGE_DIR / schema_file).read_text())
    out = ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
    for r in rows(schema):
        meaning = r.description.replace("|", r"\|")
        out.append(f"| `{r.field}` | {r.kind} | {'yes' if r.required else ''} | {r.default} "
                   f"| {meaning} |")
    return "\n".join(out) + "\n"


def _file(rel: str) -> str:
    path = REPO_ROOT / rel
    fence = _FENCE.get(path.suffix, "")
    text = path.read_text()
    return f"`{rel.removeprefix('docs/first-task/')}`:\n\n```{fence}\n{text.rstrip()}\n```\n"


def render(doc: str) -> str:
    """`doc` with every generated block made anew."""
    def block(m: re.Match[str]) -> str:
        what = m.group("what").strip()
        if what in ("task.toml", "benchmark.toml"):
            body = table(what.replace(".toml", ".schema.yaml"))
        elif what.startswith("file "):
            body = _file(what.removeprefix("file ").strip())
        else:
            raise ValueError(f"unknown generated block {what!r}")
        return m.group(1) + body + m.group(4)
    return BLOCK.sub(block, doc)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the guide's generated parts; with --check, exit 1 when they are out of date."""
    parser = argparse.ArgumentParser(prog="python -m sforge.check.schema_doc",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the doc is out of date instead of writing it")
    parser.add_argument("doc", nargs="?", type=Path, default=DOC)
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    fresh = render(text)
    if fresh == text:
        return 0
    if args.check:
        print(f"{args.doc}: out of date; run python -m sforge.check.schema_doc", file=sys.stderr)
        return 1
    args.doc.write_text(fresh)
    print(f"{args.doc}: updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
