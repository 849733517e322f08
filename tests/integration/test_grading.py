"""Integration: grading through the CLI and Snakemake on real images."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.archives import archive
from tests.helpers.benches import results_of
from tests.helpers.paths import REPO

pytestmark = pytest.mark.docker

REQUIRED = {"task", "submission", "source", "valid", "score", "summary", "details", "metrics",
            "rescaled", "timed_out", "duration_s", "judge_image", "rejected"}


def batch(sf, answers: dict[tuple[str, str], str]) -> None:
    for (source, task), value in answers.items():
        archive(sf.bench / "submissions" / source / task / "run1.tar.gz", {"answer.txt": value})


def test_eval_json_stores_and_does_not_regrade(minibench, tmp_path):
    sub = archive(tmp_path / "sub.tar.gz", {"./answer.txt": "7\n", "notes.md": "hi"})
    proc = minibench.run("eval", "--task", "alpha", "--archive", str(sub), "--json",
                         "--source", "agent-x", check=True)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert set(out) >= REQUIRED
    assert out["valid"] is True and out["score"] == 7.0 and out["rescaled"] == 70.0
    assert out["source"] == "agent-x" and out["task"] == "alpha"
    assert {r["path"] for r in out["rejected"]} == {"notes.md"}
    stored = list((minibench.results / minibench.name / "submissions" / "agent-x" / "alpha")
                  .glob("*.tar.gz"))
    assert [p.name for p in stored] == [f"{out['submission']}.tar.gz"]
    sidecar = json.loads(stored[0].with_name(f"{out['submission']}.json").read_text())
    assert sidecar["filename"] == "sub.tar.gz"  # the upload's name, for the report
    before = results_of(minibench)
    assert len(before) == 1
    again = minibench.run("eval", "--task", "alpha", "--archive", "-", "--json",
                          "--source", "agent-x", check=True, stdin=sub.read_bytes())
    assert json.loads(again.stdout)["submission"] == out["submission"]
    assert "already graded" in again.stderr
    assert results_of(minibench) == before
    # A new results directory with the images present (a CI job, a new user): the sentinels
    # are recorded by the rule's own function, and Snakemake is never started.
    nosnake = tmp_path / "nosnake" / "snakemake"
    nosnake.mkdir(parents=True)
    (nosnake / "__init__.py").write_text("raise ImportError('Snakemake must not start')\n")
    fresh = tmp_path / "fresh"
    first = minibench.run("eval", "--task", "alpha", "--archive", str(sub), "--json",
                          results=fresh, env={"PYTHONPATH": str(nosnake.parent)}, check=True)
    assert json.loads(first.stdout)["score"] == 7.0
    recorded = [json.loads(p.read_text()) for p in
                (fresh / minibench.name / "images").glob("*/*/*.json")]
    assert recorded and all(r["reused"] for r in recorded)


def test_eval_builds_missing_judge(minibench, tmp_path):
    sub = archive(tmp_path / "s.tar", {"answer.txt": "3"})
    proc = minibench.run("eval", "--task", "gamma", "--archive", str(sub), check=True)
    assert "valid score=3.0" in proc.stdout
    assert "judge/gamma" in minibench.sentinels() and "work/gamma" not in minibench.sentinels()


def test_daemon_unreachable_leaves_no_result(minibench, tmp_path):
    minibench.run("build", "--task", "alpha", check=True)
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "1"})
    proc = minibench.run("eval", "--task", "alpha", "--archive", str(sub),
                         env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert proc.returncode != 0
    assert "Docker daemon" in proc.stderr
    assert results_of(minibench) == {}
    # the next run retries and grades
    minibench.run("eval", "--task", "alpha", "--archive", str(sub), check=True)
    assert len(results_of(minibench)) == 1


def test_batch_grading_is_incremental(minibench):
    batch(minibench, {("s1", "alpha"): "1", ("s1", "beta"): "2", ("s1", "gamma"): "3",
                      ("s2", "alpha"): "4", ("s2", "beta"): "5", ("s2", "gamma"): "6",
                      ("s3", "alpha"): "1"})  # s3/alpha is byte-identical to s1/alpha
    (minibench.bench / "submissions" / "s2" / "alpha" / "run1.json").write_text(
        json.dumps({"elapsed_s": 3600, "agent": "a", "model": "m"}))
    first = minibench.run("grade", "-j", "2", check=True)
    assert "7 submission(s), 6 distinct" in first.stdout and "6 graded" in first.stdout
    graded = results_of(minibench)
    assert len(graded) == 6
    again = minibench.run("grade", check=True)
    assert "6 up to date, 0 graded" in again.stdout
    assert results_of(minibench) == graded
    # the grader edited: exactly that task's results are graded again
    run_sh = minibench.bench / "tasks" / "beta" / "judge" / "run.sh"
    run_sh.write_text(run_sh.read_text() + "# v2\n")
    regrade = minibench.run("grade", check=True)
    assert "2 graded" in regrade.stdout, regrade.stdout
    # a judge setting changed (timeout): exactly that task's results again
    toml = minibench.bench / "tasks" / "gamma" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 30", "timeout_sec = 31"))
    assert "2 graded" in minibench.run("grade", check=True).stdout
    # instruction or version edits change no key
    (minibench.bench / "tasks" / "alpha" / "instruction.md").write_text("new words\n")
    assert "0 graded" in minibench.run("grade", check=True).stdout


def test_plain_snakemake_grade_target(minibench):
    batch(minibench, {("s1", "alpha"): "9", ("s1", "gamma"): "8"})
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "grade", "--cores", "2",
         "--config", f"benchmark={minibench.bench}", f"results={minibench.results}"],
        cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = sorted(json.loads(p.read_text())["score"]
                    for p in (minibench.results / minibench.name / "evals").glob("*/*.json"))
    assert scores == [8.0, 9.0]
    assert "0 graded" in minibench.run("grade", check=True).stdout


def test_judge_local_tool(minibench, tmp_path):
    minibench.run("build", "--task", "beta", check=True)
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "5"})
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "judge_local.py"),
                           str(minibench.bench / "tasks" / "beta"), str(sub)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["valid"] and out["score"] == 5.0 and out["rescaled"] == 50.0
    assert out["judge_image"].startswith(f"{minibench.name}.judge.beta:")
    assert not (minibench.results / minibench.name / "evals").exists()  # nothing written
