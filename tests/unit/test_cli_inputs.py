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
NOT_UTF8 = b'id = "reverse_lines"\nname = "caf\xe9"\n'  # Latin-1: 0xe9 on line 2


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


def test_eval_of_a_broken_task_says_why_and_fails_as_grade_does(bench, tmp_path):
    """eval of a task whose task.toml does not load: one line naming the file, its line and
    the field (as `check` says it), exit 1 as `grade` gives for the same task; an id that
    names no task directory stays an input error with the hint the other commands give."""
    res = str(tmp_path / "res")
    toml = bench / "tasks" / "reverse_lines" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", 'timeout_sec = "60"'))
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"")
    grade = sforge("grade", "-t", "reverse_lines", "-b", str(bench), "--results", res)
    line = one_line_error(sforge("eval", "-t", "reverse_lines", "-a", str(archive),
                                 "-b", str(bench), "--results", res), grade.returncode)
    assert grade.returncode == 1
    [finding] = [f for f in sforge("check", "-b", str(bench)).stdout.splitlines()
                 if str(toml) in f]
    where = finding.split(": definition: ")[0]  # path:line
    assert line == (f"sforge: error: task 'reverse_lines' failed to load: {where}: "
                    "[judge.timeout_sec] '60' is not of type 'number'"), (line, finding)
    proc = sforge("eval", "-t", "reverse_lines", "-a", str(archive), "--json",
                  "-b", str(bench), "--results", res)
    assert json.loads(proc.stdout) == {"error": line.removeprefix("sforge: error: "),
                                       "kind": "failed", "code": 1}
    unknown = one_line_error(sforge("eval", "-t", "nosuch", "-a", str(archive),
                                    "-b", str(bench), "--results", res), 3)
    assert unknown == one_line_error(sforge("plan", "-t", "nosuch", "-b", str(bench),
                                            "--results", res), 3)
    assert "unknown task(s): nosuch (see `sforge list" in unknown


def test_list_and_plan_count_a_broken_task_in_their_text(bench, tmp_path):
    """A task that fails to load is not silently missing from list's and plan's summary:
    both say how many are broken (the errors follow on stderr) and exit 1."""
    res = str(tmp_path / "res")
    toml = bench / "tasks" / "reverse_lines" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", 'timeout_sec = "60"'))
    listed = sforge("list", "-b", str(bench), "--results", res)
    assert listed.returncode == 1 and "1 broken (errors below)" in listed.stdout.splitlines()[0]
    assert "is not of type 'number'" in listed.stderr
    planned = sforge("plan", "-b", str(bench), "--results", res)
    assert planned.returncode == 1, planned.stderr
    assert "1 broken task(s) not planned (errors below)" in planned.stdout


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


def test_a_task_toml_that_is_not_utf8_is_a_finding_and_a_broken_task(bench):
    toml = bench / "tasks" / "reverse_lines" / "task.toml"
    toml.write_bytes(NOT_UTF8)
    proc = sforge("check", "--json", "-b", str(bench))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    bad = [f for f in findings if f["file"] == str(toml)]
    assert len(bad) == 1 and bad[0]["rule"] == "definition", findings
    assert "not UTF-8 text" in bad[0]["message"] and bad[0]["line"] == 2, bad
    proc = sforge("list", "--json", "-b", str(bench))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    listed = json.loads(proc.stdout)
    assert "reverse_lines" not in [t["id"] for t in listed["tasks"]]
    assert any(str(toml) in e and "not UTF-8 text" in e for e in listed["errors"]), listed


def test_a_benchmark_toml_that_is_not_utf8(bench):
    toml = bench / "benchmark.toml"
    toml.write_bytes(b'name = "caf\xe9"\n')
    proc = sforge("check", "--json", "-b", str(bench))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    [finding] = json.loads(proc.stdout)["findings"]
    assert finding["file"] == str(toml) and "not UTF-8 text" in finding["message"]
    assert finding["line"] == 1
    err = one_line_error(sforge("list", "-b", str(bench)), 3)
    assert str(toml) in err and "not UTF-8 text" in err


def test_a_toml_syntax_error_has_its_line_in_the_finding(bench):
    toml = bench / "tasks" / "reverse_lines" / "task.toml"
    toml.write_text('id = "reverse_lines"\nname = = 1\n')
    proc = sforge("check", "--json", "-b", str(bench))
    [finding] = [f for f in json.loads(proc.stdout)["findings"] if f["file"] == str(toml)]
    assert "(at line 2, column 8)" in finding["message"] and finding["line"] == 2, finding


def test_a_config_file_that_is_not_utf8_is_one_line(bench, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_bytes(b"jobs: 1\nresults: caf\xe9\n")
    err = one_line_error(sforge("list", "--config", str(config), "-b", str(bench)), 3)
    assert err.startswith(f"sforge: error: {config}: ") and "not UTF-8 text" in err
    proc = sforge("list", "--json", "--config", str(config), "-b", str(bench))
    assert json.loads(proc.stdout)["code"] == 3


def test_a_results_root_that_is_a_file_is_one_line(bench, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    err = one_line_error(sforge("list", "--results", str(afile), "-b", str(bench)), 3)
    assert str(afile) in err and "not a directory" in err
    err = one_line_error(sforge("plan", "--results", str(afile / "deeper"), "-b", str(bench)),
                         3)
    assert str(afile) in err and "not a directory" in err


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_serve_refuses_a_port_out_of_range(bench, port):
    proc = sforge("serve", "--port", port, "-b", str(bench))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "sforge: error: serve: argument --port: " in proc.stderr
    assert "expected a port number, 0 to 65535" in proc.stderr


def test_check_task_reports_only_that_tasks_findings(tmp_path):
    """`check -t ID` checks the tasks it names, as its help says: another task's findings
    are not this task's (benchmark-wide files, like bases/, are still checked)."""
    root = tmp_path / "bench"
    shutil.copytree(paths.FIXTURES / "scores_bench", root)
    every = json.loads(sforge("check", "--json", "-b", str(root)).stdout)["findings"]
    assert any("norescale_task" in f["file"] for f in every), every
    one = json.loads(sforge("check", "-t", "max_task", "--json", "-b", str(root)).stdout)
    files = [f["file"] for f in one["findings"]]
    assert not [f for f in files if "/tasks/" in f and "/tasks/max_task/" not in f], files


@pytest.mark.parametrize("args", [("--max-concurrent", "-3"), ("--max-concurrent", "0"),
                                  ("--max-pending", "0"), ("--max-concurrent", "inf")])
def test_serve_refuses_a_capacity_that_is_not_positive(bench, args):
    """A capacity of -3 CPUs was taken as is (and 0 silently as the machine's cores)."""
    proc = sforge("serve", *args, "-b", str(bench))
    assert proc.returncode == 2 and f"argument {args[0]}" in proc.stderr, proc.stderr
