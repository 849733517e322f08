"""Only the engine modules speak Docker: every other module goes through ContainerEngine."""

from __future__ import annotations

import ast
from pathlib import Path

import sforge

ROOT = Path(sforge.__file__).parent
ENGINE = {ROOT / "containers" / "docker.py", ROOT / "containers" / "http.py"}


def _docker_imports(path: Path) -> list[str]:
    """`docker` or `docker.*` imports anywhere in the file (late imports in functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {n}" for n in names
                  if n == "docker" or n.startswith("docker.")]
    return found


def test_only_the_engine_imports_the_docker_sdk() -> None:
    modules = [p for p in ROOT.rglob("*.py") if p not in ENGINE]
    assert len(modules) > 20  # the walk saw the package
    assert [hit for p in modules for hit in _docker_imports(p)] == []


def test_the_check_sees_late_and_from_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import dockerfile_parse\nfrom .docker import x\n"
                      "def f():\n    import docker.errors\n    from docker.types import Mount\n")
    assert _docker_imports(sample) == ["x.py:4: docker.errors", "x.py:5: docker.types"]
    assert _docker_imports(ROOT / "containers" / "docker.py")  # the engine does import it
