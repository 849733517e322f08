"""Where a dotted field of a TOML file is written (its line), so findings can point at it."""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_KEY = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")


def _unquote_key(key: str) -> str:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', key)
    return ".".join(a or b or c for a, b, c in parts)


def toml_lines(text: str) -> dict[str, int]:
    """Dotted field → 1-based line, for every table header and key: 'judge.memory',
    'blobs[0].path', 'score.rescale'. Good enough for locating what the loader names."""
    lines: dict[str, int] = {}
    table, counts = "", dict[str, int]()
    depth = 0  # inside a multi-line array or inline table: no keys to find there
    for no, raw in enumerate(text.splitlines(), 1):
        if depth == 0 and (m := _HEADER.match(raw)):
            name = _unquote_key(m.group(2))
            if m.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                table = f"{name}[{counts[name]}]"
                lines.setdefault(name, no)
            else:
                table = name
            lines.setdefault(table, no)
            continue
        if depth == 0 and (m := _KEY.match(raw)):
            key = _unquote_key(m.group(1))
            lines.setdefault(f"{table}.{key}" if table else key, no)
        stripped = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'|#.*', "", raw)
        depth = max(0, depth + stripped.count("[") + stripped.count("{")
                    - stripped.count("]") - stripped.count("}"))
    return lines


def locate(path: Path, fieldname: str | None) -> int | None:
    """The line of `fieldname` in the TOML file at `path` (or of its nearest parent), or None."""
    if not fieldname or not path.is_file():
        return None
    try:
        lines = toml_lines(path.read_text(errors="replace"))
    except OSError:
        return None
    name = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", fieldname)
    while name:
        if name in lines:
            return lines[name]
        # A parameter inside an inline table, or a missing key: the nearest enclosing entry.
        name = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", name) if re.search(r"[.\[]", name) else ""
    return None


