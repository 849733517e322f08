"""What the CLI says about a bad input (no Docker): a task id that names no task, a missing
benchmark, a file that is not UTF-8 text, a results root that is a file, an out-of-range
number. Each is one line and its documented exit code (3 input, 2 usage), with --json the
error object, and `check` never reports "0 error(s)" for something it did not check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import paths
from tests.helpers.cli import sforge

FIXTURE = paths.REPO / "docs" / "first-task"  # one task, reverse_lines; checks clean


@pytest.fixture
def bench(tmp_path) -> Path:
    root = tmp_path / "bench"
    shutil.copytree(FIXTURE, root)
    return root


def one_line_error(proc, code: int) -> str:
    """The one stderr line of a command that stopped with `code` (no traceback)."""
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    return proc.stderr.strip()


def test_check_refuses_an_unknown_task_as_every_command_does(bench, tmp_path):
    res = str(tmp_path / "res")
    plan = one_line_error(sforge("plan", "-t", "nosuch", "-b", str(bench), "--results", res), 3)
    assert "unknown task(s): nosuch" in plan
    assert one_line_error(sforge("check", "-t", "nosuch", "-b", str(bench)), 3) == plan
    proc = sforge("check", "-t", "reverse_lines", "-t", "nosuch", "--json", "-b", str(bench))
    assert proc.returncode == 3
    assert json.loads(proc.stdout) == {"error": plan.removeprefix("sforge: error: "),
                                       "kind": "input", "code": 3}
    assert sforge("check", "-t", "reverse_lines", "-b", str(bench)).returncode == 0


def test_check_of_a_missing_benchmark_is_an_input_error(tmp_path):
    missing = str(tmp_path / "missing")
    listed = one_line_error(sforge("list", "-b", missing), 3)
    assert one_line_error(sforge("check", "-b", missing), 3) == listed
    proc = sforge("check", "--json", "-b", missing)
    assert proc.returncode == 3 and json.loads(proc.stdout)["kind"] == "input"


def test_check_repeat_must_be_positive(bench):
    proc = sforge("check", "--repeat", "0", "-b", str(bench))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "sforge: error: check: argument --repeat: 0: expected 1 or more" in proc.stderr
