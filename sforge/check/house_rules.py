"""A benchmark's house rules (`[check]` of benchmark.toml) applied to one task: metadata keys
and NOTES.md sections. Rule names: `<key>-missing`, `<key>-unknown` (not an allowed value),
`<key>-format` (not matching the pattern, or not a string), `notes-missing`, `notes-section`."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sforge.benchmark.house_rules import HouseRules, MetadataRule
from sforge.check.findings import Finding

Add = Callable[[Finding], None]


def check_house_rules(rules: HouseRules, task_dir: Path, data: dict[str, Any],
                      lines: dict[str, int], add: Add) -> None:
    """Report, through `add`, each house rule of the benchmark the task breaks."""
    for rule in rules.metadata:
        _check_key(rule, task_dir / "task.toml", data, lines, add)
    if rules.notes_sections:
        _check_notes(rules.notes_sections, task_dir / "NOTES.md", add)


def _check_key(rule: MetadataRule, toml: Path, data: dict[str, Any], lines: dict[str, int],
               add: Add) -> None:
    key, value, line = rule.key, data.get(rule.key), lines.get(rule.key)
    allowed = f"one of: {', '.join(rule.values)}" if rule.values else ""
    if value is None or (isinstance(value, str) and not value.strip()):
        what = f"no {key}" if value is None else f"{key} is empty"
        advice = "; ".join(x for x in (f"set {allowed}" if allowed else "", rule.hint) if x)
        add(Finding(toml, None if value is None else line, f"{key}-missing",
                    f"{what} (a house rule of this benchmark's [check] in benchmark.toml)"
                    + (f"; {advice}" if advice else "")))
    elif not isinstance(value, str):
        add(Finding(toml, line, f"{key}-format", f"{key} must be a string, got {value!r}"))
    elif rule.values and value not in rule.values:
        add(Finding(toml, line, f"{key}-unknown", f"{key} {value!r} is not {allowed}"))
    elif rule.pattern is not None and not re.fullmatch(rule.pattern, value):
        add(Finding(toml, line, f"{key}-format",
                    f"{key} {value!r} does not match {rule.pattern!r}"
                    + (f" ({rule.hint})" if rule.hint else "")))


def _check_notes(sections: tuple[str, ...], notes: Path, add: Add) -> None:
    if not notes.is_file():
        add(Finding(notes, None, "notes-missing",
                    "missing: this benchmark's tasks each have a NOTES.md with the sections "
                    + ", ".join(f"'## {s}'" for s in sections)))
        return
    headings = [(no, m.group(1).strip().lower())
                for no, raw in enumerate(notes.read_text(errors="replace").splitlines(), 1)
                if (m := re.match(r"^##\s+(.+?)\s*#*\s*$", raw))]
    found = {h: no for no, h in reversed(headings)}
    missing = [s for s in sections if s.lower() not in found]
    if missing:
        add(Finding(notes, None, "notes-section",
                    "missing section(s): " + ", ".join(f"'## {s}'" for s in missing)))
        return
    order = [found[s.lower()] for s in sections]
    for i in range(1, len(order)):
        if order[i] < order[i - 1]:
            add(Finding(notes, order[i], "notes-section",
                        f"'## {sections[i]}' is out of order; sections go: "
                        + ", ".join(sections)))
            break
