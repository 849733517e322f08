"""CLI manners (no image is built): global options anywhere, a closed pipe, list --json,
plan and list words, warnings for an empty tasks/ and for statuses the leaderboard skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "scores_bench"


def sforge(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sforge", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "SFORGE_BENCHMARK": ""})


@pytest.fixture
def bench(tmp_path) -> Path:
    root = tmp_path / "bench"
    shutil.copytree(FIXTURE, root)
    return root


def test_global_options_before_or_after_the_command(bench, tmp_path):
    results = tmp_path / "res"
    before = sforge("-b", str(bench), "--results", str(results), "list", "--json")
    after = sforge("list", "--json", "-b", str(bench), "--results", str(results))
    mixed = sforge("--results", str(results), "list", "-b", str(bench), "--json")
    for proc in (before, after, mixed):
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["benchmark"] == "scoresbench"
    assert json.loads(before.stdout)["tasks"] == json.loads(after.stdout)["tasks"]
    proc = sforge("plan", "--config", str(tmp_path / "missing.yaml"), "-b", str(bench))
    assert proc.returncode != 0 and "missing.yaml" in proc.stderr  # --config after plan
    assert "global options" in sforge("grade", "--help").stdout


def test_a_closed_pipe_is_no_traceback(bench):
    """`sforge list | head -1`: the reader leaves early; sforge stops quietly."""
    for args in (["list"], ["plan"], ["list", "--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "sforge", "-b", str(bench), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # before sforge has written a byte
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert code == 141, (args, code, err)
    shell = subprocess.run(f"{sys.executable} -m sforge -b {bench} list | head -1",
                           shell=True, capture_output=True, text=True)
    assert shell.stdout.startswith("benchmark scoresbench")
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr, shell.stderr


def test_list_json_metadata_is_an_object(bench):
    toml = bench / "tasks" / "max_task" / "task.toml"
    toml.write_text(toml.read_text().replace('id = "max_task"',
                                             'id = "max_task"\nadded = 2025-03-01\n'
                                             'tags = ["a", "b"]\nstatus = "active"'))
    proc = sforge("list", "--json", "-b", str(bench))
    assert proc.returncode == 0, proc.stderr
    task = next(t for t in json.loads(proc.stdout)["tasks"] if t["id"] == "max_task")
    assert task["metadata"] == {"category": "alpha", "added": "2025-03-01",
                                "tags": ["a", "b"], "status": "active"}
    assert task["ranked"] is True
    assert set(task["images"]) == {"work", "judge"}


def test_list_says_which_statuses_the_leaderboard_leaves_out(bench):
    (bench / "benchmark.toml").write_text('name = "scoresbench"\n[leaderboard]\n'
                                          'exclude_status = ["broken"]\n')
    toml = bench / "tasks" / "min_task" / "task.toml"
    toml.write_text(toml.read_text().replace('id = "min_task"',
                                             'id = "min_task"\nstatus = "broken"'))
    proc = sforge("list", "-b", str(bench))
    assert proc.returncode == 0, proc.stderr
    assert "5 task(s), 4 ranked" in proc.stdout
    assert "leaves out tasks with status broken" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("min_task"))
    assert "no (status broken)" in row
    data = json.loads(sforge("list", "--json", "-b", str(bench)).stdout)
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


@pytest.mark.docker
def test_plan_and_list_say_present_images_are_recorded_not_built(tmp_path, docker_client):
    """Images present under their content tag (say, from another results folder) are only
    recorded: plan and list must say so ("9 of 9 image(s) to make" was wrong)."""
    from conftest import copy_bench, remove_images

    bench = tmp_path / "bench"
    name = copy_bench(FIXTURE, bench)
    results = tmp_path / "res"
    data = json.loads(sforge("list", "--json", "-b", str(bench), "--results",
                             str(results)).stdout)
    tags = [t["work"] for t in data["tasks"]] + [t["judge"] for t in data["tasks"]]
    busybox = docker_client.images.get("busybox:1.36")
    try:
        for tag in tags[:4]:  # four of the ten images are present under their tags
            repo, _, digest = tag.rpartition(":")
            busybox.tag(repo, digest)
        plan = sforge("plan", "-b", str(bench), "--results", str(results))
        assert plan.returncode == 0, plan.stderr
        lines = plan.stdout.splitlines()
        recorded = [line for line in lines if line.startswith("record")]
        assert len(recorded) == 4 and all("present under its tag, no build" in line
                                          for line in recorded)
        assert len([line for line in lines if line.startswith("build")]) == 6
        assert lines[-1] == ("10 image(s): 6 to build, 4 present under their tag (only "
                             "recorded, no build), 0 up to date")
        listing = json.loads(sforge("list", "--json", "-b", str(bench), "--results",
                                    str(results)).stdout)
        states = {t["id"]: t["state"] for t in listing["tasks"]}
        first = data["tasks"][0]["id"]
        assert listing["tasks"][0]["images"]["work"] == "record"
        assert states[first] == "to build: judge; present, to record: work"
        text = sforge("list", "-b", str(bench), "--results", str(results)).stdout
        assert "not built" not in text and "present, to record: work" in text
    finally:
        remove_images(docker_client, name)
