"""Every public name of the package says in a docstring what it is for, so a reader need not
reverse-engineer it: modules, module-level public classes and functions, and public methods of
public classes, except dunders and methods that override a documented method of a base class."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

PACKAGE = REPO / "sforge"

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
METHOD_KINDS = (property, functools.cached_property, staticmethod, classmethod)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _public(name: str) -> bool:
    return not name.startswith("_")


def _documented_in_a_base(module: str, cls: str, method: str) -> bool:
    """Whether a base class of `module.cls` (from any package) documents `method`."""
    klass = getattr(importlib.import_module(module), cls)
    for base in inspect.getmro(klass)[1:]:
        attr = base.__dict__.get(method)
        if (inspect.isroutine(attr) or isinstance(attr, METHOD_KINDS)) \
                and (getattr(attr, "__doc__", None) or "").strip():
            return True
    return False


def undocumented(path: Path, root: Path = REPO) -> Iterator[str]:
    """`file:line name` of each public name in `path` (a module importable from `root`)
    that lacks a docstring."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_name(path, root)
    where = path.relative_to(root).as_posix()
    if ast.get_docstring(tree) is None:
        yield f"{where}:1 (module)"
    for node in tree.body:
        if isinstance(node, FUNCTIONS) and _public(node.name) and ast.get_docstring(node) is None:
            yield f"{where}:{node.lineno} {node.name}"
        if not isinstance(node, ast.ClassDef) or not _public(node.name):
            continue
        if ast.get_docstring(node) is None:
            yield f"{where}:{node.lineno} {node.name}"
        for item in node.body:
            if (isinstance(item, FUNCTIONS) and _public(item.name)
                    and ast.get_docstring(item) is None
                    and not _documented_in_a_base(module, node.name, item.name)):
                yield f"{where}:{item.lineno} {node.name}.{item.name}"


def test_every_public_name_has_a_docstring():
    missing = [m for path in sorted(PACKAGE.rglob("*.py")) for m in undocumented(path)]
    assert missing == [], f"{len(missing)} public names lack a docstring:\n" + "\n".join(missing)


PROBE = '''
class Base:
    """A documented base."""

    def run(self) -> None:
        """Run it."""

    @property
    def size(self) -> int:
        """How big."""
        return 0


class Child(Base):
    """Overrides and adds."""

    def run(self) -> None:
        pass

    @property
    def size(self) -> int:
        return 1

    def stop(self) -> None:
        pass

    def __repr__(self) -> str:
        return ""


class _Hidden:
    def go(self) -> None:
        pass


def helper() -> None:
    pass
'''


def test_the_rule_catches_missing_docstrings_and_exempts_documented_overrides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Guard the checker itself: an undocumented method counts unless a base documents it."""
    probe = tmp_path / "sforge_docstring_probe.py"
    probe.write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    got = [m.split(" ", 1)[1] for m in undocumented(probe, tmp_path)]
    assert got == ["(module)", "Child.stop", "helper"]
