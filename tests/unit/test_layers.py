"""The package's layers: a module imports only its own layer or lower ones, no two modules import
each other (at any depth, also through imports inside functions), and every module imports on its
own in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import sforge

ROOT = Path(sforge.__file__).parent

# Low to high. A module may import modules of its own layer and of the layers before it.
LAYERS: list[set[str]] = [
    {"core"},
    {"benchmark"},
    {"containers"},
    {"grading"},
    {"plan"},
    {"build"},
    {"evals"},
    {"scores"},
    {"report"},
    {"workflow"},
    {"commands"},
    {"check", "importers"},
    {"service"},
    {"runs"},
    {"cli"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> str | None:
    """The subpackage a module belongs to (None: the package's own __init__ and __main__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else None


def _imports(module: str) -> list[tuple[int, str]]:
    """(line, sforge module) for every import in the module: at module level, in functions, and
    under TYPE_CHECKING alike (a layer must not even name a higher one's types)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names
                  if n in MODULES and n != module and n != "sforge"]
    return found


def test_the_walk_sees_every_layer() -> None:
    layers = {_layer(m) for m in MODULES} - {None}
    assert layers == set(RANK), layers ^ set(RANK)


def test_no_module_imports_a_higher_layer() -> None:
    wrong = []
    for module in sorted(MODULES):
        own = _layer(module)
        if own is None:
            continue
        for line, target in _imports(module):
            other = _layer(target)
            if other is None or other == own:
                continue
            if RANK[other] >= RANK[own]:
                wrong.append(f"{MODULES[module].relative_to(ROOT.parent)}:{line}: {module} "
                             f"({own}) imports {target} ({other})")
    assert wrong == []


def test_no_import_cycles() -> None:
    graph = {m: {t for _, t in _imports(m)} for m in MODULES}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == []


def test_the_check_sees_a_higher_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    low = tmp_path / "low.py"
    low.write_text("def f():\n    from sforge.cli.main import main\n")
    monkeypatch.setitem(MODULES, "sforge.core.fake", low)
    assert (2, "sforge.cli.main") in _imports("sforge.core.fake")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_module_imports_first(module: str) -> None:
    """Imported first in a fresh interpreter, whatever it is: no order of imports is needed."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _late_imports(module: str) -> list[tuple[int, str]]:
    """(line, text) of the imports of sforge modules made inside functions, without a comment
    on that line or the line above saying that they buy start-up time."""
    path = MODULES[module]
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source, str(path))
    top = {id(n) for n in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` and the like are module level too
        if isinstance(node, ast.If | ast.Try):
            top.update(id(n) for n in ast.walk(node))
    late = []
    for node in ast.walk(tree):
        if id(node) in top or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                 else [a.name for a in node.names])
        if not any(n == "sforge" or n.startswith("sforge.") for n in names):
            continue
        # the block of imports this one stands in, and the line above it, say why
        first = node.lineno - 1
        while first > 0 and (not lines[first - 1].strip()
                             or lines[first - 1].strip().startswith(("from ", "import "))):
            first -= 1
        said = " ".join(lines[max(0, first - 1):node.end_lineno or node.lineno])
        if "start-up" not in said:
            late.append((node.lineno, lines[node.lineno - 1].strip()))
    return late


def test_late_imports_say_why() -> None:
    """An import of sforge's own modules inside a function is there for start-up time only
    (a command that does not need a heavy module does not load it), and says so."""
    late = [f"{MODULES[m].relative_to(ROOT.parent)}:{line}: {text}"
            for m in sorted(MODULES) for line, text in _late_imports(m)]
    assert late == []
