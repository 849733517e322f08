"""CLI manners (no image is built): global options anywhere, a closed pipe, list --json,
plan and list words, warnings for an empty tasks/ and for statuses the leaderboard skips."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import paths
from tests.helpers.cli import sforge

FIXTURE = paths.FIXTURES / "scores_bench"


@pytest.fixture
def scores_bench_dir(tmp_path) -> Path:
    """A writable copy of fixtures/scores_bench."""
    root = tmp_path / "bench"
    shutil.copytree(FIXTURE, root)
    return root


def test_global_options_before_or_after_the_command(scores_bench_dir, tmp_path):
    results = tmp_path / "res"
    before = sforge("-b", str(scores_bench_dir), "--results", str(results), "list", "--json")
    after = sforge("list", "--json", "-b", str(scores_bench_dir), "--results", str(results))
    mixed = sforge("--results", str(results), "list", "-b", str(scores_bench_dir), "--json")
    for proc in (before, after, mixed):
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["benchmark"] == "scoresbench"
    assert json.loads(before.stdout)["tasks"] == json.loads(after.stdout)["tasks"]
    proc = sforge("plan", "--config", str(tmp_path / "missing.yaml"), "-b", str(scores_bench_dir))
    assert proc.returncode != 0 and "missing.yaml" in proc.stderr  # --config after plan
    assert "global options" in sforge("grade", "--help").stdout


def test_a_closed_pipe_is_no_traceback(scores_bench_dir):
    """`sforge list | head -1`: the reader leaves early; sforge stops quietly."""
    for args in (["list"], ["plan"], ["list", "--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "sforge", "-b", str(scores_bench_dir),
                                 *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # before sforge has written a byte
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert code == 141, (args, code, err)
    shell = subprocess.run(f"{sys.executable} -m sforge -b {scores_bench_dir} list | head -1",
                           shell=True, capture_output=True, text=True)
    assert shell.stdout.startswith("benchmark scoresbench")
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr, shell.stderr


def test_list_json_metadata_is_an_object(scores_bench_dir):
    toml = scores_bench_dir / "tasks" / "max_task" / "task.toml"
    toml.write_text(toml.read_text().replace('id = "max_task"',
                                             'id = "max_task"\nadded = 2025-03-01\n'
                                             'tags = ["a", "b"]\nstatus = "active"'))
    proc = sforge("list", "--json", "-b", str(scores_bench_dir))
    assert proc.returncode == 0, proc.stderr
    task = next(t for t in json.loads(proc.stdout)["tasks"] if t["id"] == "max_task")
    assert task["metadata"] == {"category": "alpha", "added": "2025-03-01",
                                "tags": ["a", "b"], "status": "active"}
    assert task["ranked"] is True
    assert set(task["images"]) == {"work", "judge"}


def test_list_json_base_is_null_without_a_base(scores_bench_dir):
    """A task on no base: null in --json (a script tests for it), "-" in the table; a task
    on a base: its name in both."""
    (scores_bench_dir / "bases" / "py").mkdir(parents=True)
    (scores_bench_dir / "bases" / "py" / "Dockerfile").write_text("FROM scratch\n")
    toml = scores_bench_dir / "tasks" / "max_task" / "task.toml"
    toml.write_text(toml.read_text() + '\n[environment]\nbase = "py"\n')
    proc = sforge("list", "--json", "-b", str(scores_bench_dir))
    assert proc.returncode == 0, proc.stderr
    bases = {t["id"]: t["base"] for t in json.loads(proc.stdout)["tasks"]}
    assert bases["max_task"] == "py" and bases["min_task"] is None, bases
    table = sforge("list", "-b", str(scores_bench_dir)).stdout
    assert re.search(r"^min_task +Minimize, min_linear +- +category=alpha ", table, re.M), table
    assert re.search(r"^max_task +Maximize, linear +py +category=alpha ", table, re.M), table


def test_list_says_which_statuses_the_leaderboard_leaves_out(scores_bench_dir):
    (scores_bench_dir / "benchmark.toml").write_text('name = "scoresbench"\n[leaderboard]\n'
                                          'exclude_status = ["broken"]\n')
    toml = scores_bench_dir / "tasks" / "min_task" / "task.toml"
    toml.write_text(toml.read_text().replace('id = "min_task"',
                                             'id = "min_task"\nstatus = "broken"'))
    proc = sforge("list", "-b", str(scores_bench_dir))
    assert proc.returncode == 0, proc.stderr
    assert "5 task(s), 4 ranked" in proc.stdout
    assert "leaves out tasks with status broken" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("min_task"))
    assert "no (status broken)" in row
    data = json.loads(sforge("list", "--json", "-b", str(scores_bench_dir)).stdout)
    assert data["exclude_status"] == ["broken"]
    assert [t["id"] for t in data["tasks"] if not t["ranked"]] == ["min_task"]


def test_empty_tasks_dir_warns_once_per_command(tmp_path):
    root = tmp_path / "empty"
    (root / "tasks").mkdir(parents=True)
    (root / "benchmark.toml").write_text('name = "nothing"\n')
    for cmd in ("list", "plan", "check"):
        proc = sforge(cmd, "-b", str(root))
        warning = f"warning: {root / 'tasks'}: no task directories"
        assert proc.stderr.count(warning) == 1, (cmd, proc.stderr)
