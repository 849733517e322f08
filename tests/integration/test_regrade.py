"""Re-grading on purpose: `eval --force`, `grade/report --regrade`, `check --repeat N` against
a grader whose verdict changes at every run (it scores the clock) and a deterministic one."""

from __future__ import annotations

import csv
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def _answer(path: Path, value: str = "7") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("answer.txt")
        info.size = len(value)
        tar.addfile(info, io.BytesIO(value.encode()))
    return path


def _add_clock_task(sf) -> None:
    """Task `clock`: gamma's environment, a judge whose score is the machine's uptime."""
    gamma = sf.bench / "tasks" / "gamma"
    clock = sf.bench / "tasks" / "clock"
    shutil.copytree(gamma, clock)
    toml = clock / "task.toml"
    toml.write_text(toml.read_text().replace('id = "gamma"', 'id = "clock"'))
    (clock / "judge" / "run.sh").write_text(
        "#!/bin/sh\nt=$(cut -d' ' -f1 /proc/uptime)\n"
        'printf \'{"valid": true, "score": %s, "summary": "uptime %s"}\' "$t" "$t" '
        "> /opt/sforge/result.json\n")


def _history(sf, task: str) -> list[Path]:
    return sorted((sf.results / sf.name / "evals" / task / "history").glob("*.json"))


def test_eval_force_keeps_the_old_result_and_tables_use_the_newest(minibench, tmp_path):
    _add_clock_task(minibench)
    sub = _answer(tmp_path / "sub.tar")
    first = json.loads(minibench.run("eval", "-t", "clock", "-a", str(sub), "--json",
                                     check=True).stdout)
    again = minibench.run("eval", "-t", "clock", "-a", str(sub), "--json", check=True)
    assert "already graded" in again.stderr and json.loads(again.stdout)["score"] == \
        first["score"]
    forced = minibench.run("eval", "-t", "clock", "-a", str(sub), "--json", "--force",
                           check=True)
    second = json.loads(forced.stdout)
    assert "already graded" not in forced.stderr and second["score"] != first["score"]
    [old] = _history(minibench, "clock")
    assert json.loads(old.read_text())["score"] == first["score"]
    assert old.with_suffix(".log").is_file()  # its log is kept beside it
    minibench.run("report", check=True)
    rows = list(csv.DictReader((minibench.results / minibench.name / "scores.csv").open()))
    assert [float(r["score"]) for r in rows if r["task"] == "clock"] == [second["score"]]


def test_grade_and_report_regrade_chosen_tasks(minibench, tmp_path):
    _add_clock_task(minibench)
    for task in ("clock", "gamma"):
        _answer(minibench.bench / "submissions" / "team" / task / "run1.tar")
    minibench.run("grade", "-t", "clock", "-t", "gamma", check=True)
    evals = minibench.results / minibench.name / "evals"
    before = {t: json.loads(next((evals / t).glob("*.json")).read_text())["score"]
              for t in ("clock", "gamma")}
    proc = minibench.run("grade", "-t", "clock", "-t", "gamma", "--regrade", "clock",
                         check=True)
    assert "1 graded" in proc.stdout
    assert len(_history(minibench, "clock")) == 1 and not _history(minibench, "gamma")
    assert json.loads(next((evals / "clock").glob("*.json")).read_text())["score"] != \
        before["clock"]
    minibench.run("report", "--regrade", "clock", check=True)
    assert len(_history(minibench, "clock")) == 2
    bad = minibench.run("grade", "--regrade", "nosuch")
    assert bad.returncode != 0 and "nosuch" in bad.stderr


def test_check_repeat_flags_a_grader_whose_verdicts_differ(minibench):
    _add_clock_task(minibench)
    for task in ("clock", "gamma"):
        _answer(minibench.bench / "submissions" / "reference" / task / "ref.tar")
    proc = minibench.run("check", "--repeat", "3", "-t", "clock", "-t", "gamma")
    assert proc.returncode == 1
    flagged = [ln for ln in proc.stdout.splitlines() if "nondeterministic-grader" in ln]
    assert len(flagged) == 1 and "tasks/clock/task.toml" in flagged[0], proc.stdout
    assert "3 runs of the judge on ref.tar disagree" in flagged[0]
    assert "gamma: 3 runs agree (valid 7.0)" in proc.stdout
    assert not (minibench.results / minibench.name / "evals").exists()  # nothing stored


def test_regrade_with_the_daemon_down_keeps_the_stored_result(minibench, tmp_path):
    """An infrastructure failure decides nothing: `grade --regrade` and `eval --force` that
    cannot reach a judge leave the stored result (and its log) the current one."""
    sub = _answer(minibench.bench / "submissions" / "team" / "gamma" / "run1.tar")
    minibench.run("grade", "-t", "gamma", check=True)
    [result] = (minibench.results / minibench.name / "evals" / "gamma").glob("*.json")
    stored = {p: p.read_bytes() for p in (result, result.with_suffix(".log"))}
    down = {"DOCKER_HOST": "unix:///nonexistent.sock"}
    for args in (("grade", "-t", "gamma", "--regrade", "gamma"),
                 ("eval", "-t", "gamma", "-a", str(sub), "--force")):
        proc = minibench.run(*args, env=down)
        assert proc.returncode == 4 and "Docker daemon" in proc.stderr, proc.stderr
        assert {p: p.read_bytes() for p in stored} == stored, args
        assert not _history(minibench, "gamma"), args
        assert "0 graded" in minibench.run("grade", "-t", "gamma", check=True).stdout, args
    # with the daemon up, a regrade still sets the old result aside into history/
    minibench.run("grade", "-t", "gamma", "--regrade", "gamma", check=True)
    assert len(_history(minibench, "gamma")) == 1 and result.is_file()
