"""`[submission] paths` and `exclude`: which paths of an archive a task selects."""

from __future__ import annotations

import fnmatch

from sforge.benchmark.model import SubmissionRules

_GLOB_CHARS = frozenset("*?[")
# Names a submitted file may take where a grader finds it by name (a command on PATH, a file
# under a folder): what `Selection.reaches` tries beside the paths the task names.
LIKELY_NAMES = ("sh", "bash", "python", "python3", "node", "perl", "env", "pytest", "make",
                "data", "file")


def ancestors(path: str) -> list[str]:
    """Every proper ancestor of a relative path, outermost first."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or inside it, component-wise ("" holds everything)."""
    return prefix == "" or path == prefix or path.startswith(prefix + "/")


def clean_path(pattern: str) -> str:
    """A path or pattern as the rules compare it: no blanks around it, no empty or "."
    components ("./build/" → "build", "." → "")."""
    parts = [p for p in pattern.strip().split("/") if p not in ("", ".")]
    return "/".join(parts)


class Selection:
    """`[submission] paths` and `exclude`, normalized once."""

    def __init__(self, rules: SubmissionRules):
        self.paths = [clean_path(p) for p in rules.paths]
        self.everything = "" in self.paths
        self.exclude = [(raw, clean_path(raw)) for raw in rules.exclude]

    def reason(self, path: str) -> str | None:
        """Why the task's rules leave `path` out, or None if it is selected."""
        if not self.everything and not any(under(path, p) for p in self.paths):
            return "not in [submission] paths"
        for raw, pat in self.exclude:
            if not pat:
                continue
            if _GLOB_CHARS.isdisjoint(pat):
                hit = under(path, pat)
            elif "/" in pat:
                hit = any(fnmatch.fnmatchcase(p, pat) for p in [*ancestors(path), path])
            else:
                hit = any(fnmatch.fnmatchcase(c, pat) for c in path.split("/"))
            if hit:
                return f"excluded by {raw!r}"
        return None

    def reaches(self, folder: str, direct: bool = False) -> bool:
        """Some submitted file can land inside cwd-relative `folder` (with `direct`: right
        in it, as a command found on PATH there): one of LIKELY_NAMES there, or a path the
        task names inside it, is selected."""
        folder = clean_path(folder)
        inside = [p for p in self.paths if p != folder and under(p, folder)
                  and (not direct or p.rpartition("/")[0] == folder)]
        tried = [f"{folder}/{n}" if folder else n for n in LIKELY_NAMES] + inside
        return any(self.reason(p) is None for p in tried)

    def is_parent(self, path: str) -> bool:
        """A directory on the way to a selected path (created by Docker anyway)."""
        return not self.everything and any(p.startswith(path + "/") for p in self.paths)
