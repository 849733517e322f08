"""A benchmark's house rules (`[check]` in benchmark.toml) bind that benchmark only: the
format's rules are errors for every benchmark, EdgeBench's own rules for EdgeBench."""

from __future__ import annotations

import shutil
from pathlib import Path

from sforge.check import check_benchmark, format_findings
from tests.helpers.paths import FIXTURES as ALL_FIXTURES
from tests.helpers.paths import REPO

CHECK_FIXTURES = ALL_FIXTURES / "check"

EXAMPLE = REPO / "docs" / "first-task"
FIXTURES = CHECK_FIXTURES
RULES = """
[check]
notes_sections = ["What it measures", "Grading"]

[check.metadata.status]
values = ["draft", "active"]

[check.metadata.version]
pattern = '\\d+\\.\\d+\\.\\d+'
hint = "start at 1.0.0"
"""


def _bench(tmp_path: Path, rules: str = "") -> Path:
    root = tmp_path / "mybench"
    shutil.copytree(EXAMPLE, root)
    (root / "benchmark.toml").write_text((root / "benchmark.toml").read_text() + rules)
    return root


def test_a_minimal_task_has_no_house_rules_to_meet(tmp_path: Path):
    assert check_benchmark(_bench(tmp_path)) == []


def test_declared_house_rules_are_errors(tmp_path: Path):
    root = _bench(tmp_path, RULES)
    findings = check_benchmark(root)
    got = {(f.rule, f.file.relative_to(root).as_posix(), f.severity) for f in findings}
    assert got == {("status-missing", "tasks/reverse_lines/task.toml", "error"),
                   ("version-missing", "tasks/reverse_lines/task.toml", "error"),
                   ("notes-missing", "tasks/reverse_lines/NOTES.md", "error")}, \
        format_findings(findings)
    version = next(f for f in findings if f.rule == "version-missing")
    assert "start at 1.0.0" in version.message and "[check]" in version.message


def test_values_pattern_and_sections(tmp_path: Path):
    root = _bench(tmp_path, RULES)
    task = root / "tasks" / "reverse_lines"
    toml = task / "task.toml"
    toml.write_text('status = "live"\nversion = "v1"\n' + toml.read_text())
    (task / "NOTES.md").write_text("# x\n\n## Grading\n\n## What it measures\n")
    findings = check_benchmark(root)
    by_rule = {f.rule: f for f in findings}
    assert set(by_rule) == {"status-unknown", "version-format", "notes-section"}, \
        format_findings(findings)
    assert by_rule["status-unknown"].line == 1 and "'live'" in by_rule["status-unknown"].message
    assert by_rule["version-format"].line == 2
    assert by_rule["notes-section"].line == 3 and "Grading' is out of order" in \
        by_rule["notes-section"].message
    toml.write_text(toml.read_text().replace('"live"', '"active"').replace('"v1"', '"1.0.0"'))
    (task / "NOTES.md").write_text("## What it measures\n\n## Grading\n")
    assert check_benchmark(root) == []


def test_a_bad_pattern_names_its_field(tmp_path: Path):
    root = _bench(tmp_path, "\n[check.metadata.version]\npattern = '(['\n")
    (finding,) = check_benchmark(root)
    assert finding.rule == "definition" and finding.file == root / "benchmark.toml"
    assert "check.metadata.version.pattern" in finding.message
    assert finding.line == 4


def test_an_unknown_house_rule_is_a_definition_error(tmp_path: Path):
    root = _bench(tmp_path, "\n[check]\nnotes = ['x']\n")
    (finding,) = check_benchmark(root)
    assert finding.rule == "definition" and "notes" in finding.message


def test_edgebench_rules_bind_only_where_declared(tmp_path: Path):
    """The house-rule fixtures fail under EdgeBench's [check] and pass without it."""
    for case in ("status-missing", "status-unknown", "category-missing", "version-format",
                 "version-missing", "notes-missing", "notes-section"):
        root = tmp_path / case
        shutil.copytree(FIXTURES / case, root)
        assert check_benchmark(root), case
        toml = root / "benchmark.toml"
        toml.write_text(toml.read_text().split("[check]")[0])
        assert check_benchmark(root) == [], (case, format_findings(check_benchmark(root)))


def test_edgebench_declares_its_rules(tmp_path: Path):
    """A copy of an EdgeBench task that breaks its house rules fails under edgebench's own
    benchmark.toml (not a copy of its [check])."""
    root = tmp_path / "edgebench"
    shutil.copytree(REPO / "edgebench" / "bases", root / "bases")
    shutil.copy(REPO / "edgebench" / "benchmark.toml", root / "benchmark.toml")
    task = root / "tasks" / "semver_ranges"
    shutil.copytree(REPO / "edgebench" / "tasks" / "semver_ranges", task)
    assert check_benchmark(root) == []
    toml = task / "task.toml"
    toml.write_text("\n".join(line for line in toml.read_text().splitlines()
                              if not line.startswith(("status", "category"))) + "\n")
    (task / "NOTES.md").write_text("## What it measures\n")
    rules = {f.rule for f in check_benchmark(root)}
    assert rules == {"status-missing", "category-missing", "notes-section"}, rules
