"""docs/write-a-task.md: its generated parts are current, every schema field is described,
and its example task passes `sforge check` and grades (real Docker) as the page says."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from sforge.check import schema_doc
from sforge.core.config import safe_yaml
from tests.helpers.benches import copy_bench, remove_images
from tests.helpers.paths import REPO

EXAMPLE = REPO / "docs" / "first-task"


def _sforge(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sforge", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_the_guide_is_current():
    assert schema_doc.main(["--check"]) == 0, \
        "docs/write-a-task.md is stale: run python -m sforge.check.schema_doc"


def test_a_stale_guide_is_caught_and_rewritten(tmp_path: Path):
    doc = tmp_path / "doc.md"
    doc.write_text(schema_doc.DOC.read_text().replace("| `judge.cmd` |", "| `judge.command` |"))
    assert schema_doc.main(["--check", str(doc)]) == 1
    assert schema_doc.main([str(doc)]) == 0
    assert doc.read_text() == schema_doc.DOC.read_text()


def test_every_schema_field_is_described():
    for name in ("task.schema.yaml", "benchmark.schema.yaml"):
        schema = safe_yaml((schema_doc.PACKAGE_DIR / name).read_text())
        rows = list(schema_doc.rows(schema))
        assert rows and all(r.description for r in rows), \
            [r.field for r in rows if not r.description]
        table = schema_doc.table(name)
        assert all(f"| `{r.field}` |" in table for r in rows)


def test_the_guide_says_where_evals_archives_go():
    """An archive given to `sforge eval` is kept under the results' submissions/ and ranked
    by `sforge report` as source `manual` (eval's --source default): the guide says so where
    it first grades one, and how to grade one that stays off the leaderboard."""
    from sforge.benchmark.layout import Layout
    from sforge.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command")
    default = commands.choices["eval"].get_default("source")
    layout = Layout.for_benchmark("results", "mybench")
    guide = schema_doc.DOC.read_text()
    first = guide[guide.index("$ sforge -b mybench eval"):guide.index("\n## task.toml")]
    assert f"`{layout.store}/{default}/reverse_lines/" in first, first
    assert f"source `{default}`" in first, first
    assert "--timeout" in first and f"`{layout.experiments}/`" in first, first
    tests = guide[guide.index("## Test a task"):]
    assert f"source `{default}`" in tests, tests


def test_the_example_task_passes_check(tmp_path: Path):
    """A minimal correct task (no NOTES.md, no status or version) in a benchmark of its own."""
    shutil.copytree(EXAMPLE, tmp_path / "mybench")
    proc = _sforge("-b", "mybench", "check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stdout


def test_the_example_task_grades_as_the_guide_says(tmp_path: Path, docker_client):
    name = copy_bench(EXAMPLE, tmp_path / "mybench")
    try:
        sub = tmp_path / "sub"
        sub.mkdir()
        (sub / "solve.py").write_text(
            "import sys\nsys.stdout.writelines(reversed(sys.stdin.read()"
            ".splitlines(keepends=True)))\n")
        with tarfile.open(tmp_path / "solve.tar.gz", "w:gz") as tar:
            tar.add(sub / "solve.py", "solve.py")
        proc = _sforge("-b", "mybench", "eval", "--task", "reverse_lines", "--archive",
                       "solve.tar.gz", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "reverse_lines: valid score=1.0 rescaled=100.00  4/4 cases" in proc.stdout
        # results beside the benchmark folder, as the guide says
        results = tmp_path / "results" / name
        assert list((results / "evals" / "reverse_lines").glob("*.json"))
        # the archive kept where the guide says, ranked by the report as source manual; one
        # graded with --timeout (an experiment) is kept apart and ranked nowhere
        assert len(list((results / "submissions" / "manual" / "reverse_lines")
                        .glob("*.tar.gz"))) == 1
        (tmp_path / "other.py").write_text("print('hi')\n")
        with tarfile.open(tmp_path / "wrong.tar.gz", "w:gz") as tar:
            tar.add(tmp_path / "other.py", "solve.py")
        proc = _sforge("-b", "mybench", "eval", "--task", "reverse_lines", "--archive",
                       "wrong.tar.gz", "--timeout", "60", "--source", "trial", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(list((results / "experiments" / "trial" / "reverse_lines")
                        .glob("*.tar.gz"))) == 1
        proc = _sforge("-b", "mybench", "report", "--json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        board = json.loads(proc.stdout)["leaderboard"]
        assert [(r["source"], r["score"]) for r in board] == [("manual", 100.0)], board
    finally:
        remove_images(docker_client, name)
