"""A benchmark's own house rules (`[check]` in benchmark.toml): the NOTES.md sections and
metadata keys its tasks must have. The task format's rules hold for every benchmark; these
hold for the benchmark that declares them (EdgeBench declares its own)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sforge.core.errors import DefinitionError


@dataclass(frozen=True)
class MetadataRule:
    """A metadata key every task of the benchmark must set, and what its value may be."""
    key: str
    values: tuple[str, ...] = ()        # allowed values; () = any non-empty string
    pattern: str | None = None          # a regular expression the whole value must match
    hint: str = ""                      # said when the key is missing


@dataclass(frozen=True)
class HouseRules:
    """The benchmark's `[check]` table: NOTES.md sections and metadata rules of its tasks."""
    notes_sections: tuple[str, ...] = ()
    metadata: tuple[MetadataRule, ...] = field(default_factory=tuple)


def house_rules(path: Path, data: dict[str, Any]) -> HouseRules:
    """The `[check]` table of benchmark.toml (`data`, already schema-valid) as rules; a
    pattern that is no regular expression is an error naming its field."""
    table = data.get("check") or {}
    rules = []
    for key, spec in (table.get("metadata") or {}).items():
        pattern = spec.get("pattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise DefinitionError(path, f"check.metadata.{key}.pattern",
                                      f"{pattern!r} is not a regular expression: {exc}") from None
        rules.append(MetadataRule(key, tuple(spec.get("values", ())), pattern,
                                  spec.get("hint", "")))
    return HouseRules(tuple(table.get("notes_sections", ())), tuple(rules))
