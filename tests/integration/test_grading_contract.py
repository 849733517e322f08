"""One grading contract: the key covers how sforge grades, overrides are experiments,
judge_local grades as `sforge eval` does, and the archive is read once to hash and once
to filter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sforge.benchmark.loader import load_benchmark
from sforge.core.config import user_config
from sforge.grading import results
from sforge.grading.contract import judged_task
from sforge.grading.results import eval_key
from sforge.plan.pipeline import Pipeline
from sforge.plan.planner import plan_grading
from tests.helpers.archives import archive
from tests.helpers.benches import copy_bench
from tests.helpers.paths import FIXTURES, REPO


def test_contract_is_part_of_the_key(monkeypatch):
    before = eval_key("b.judge.t:0123456789ab", "0" * 64, {"timeout_sec": 5})
    monkeypatch.setattr(results, "GRADING_CONTRACT", results.GRADING_CONTRACT + 1)
    assert eval_key("b.judge.t:0123456789ab", "0" * 64, {"timeout_sec": 5}) != before


def test_report_caches_follow_the_contract(monkeypatch):
    """A task's report fingerprint depends on what keys its results: after a contract bump
    `sforge report` must not serve tables made from results under the old contract."""
    from sforge.benchmark.images import ImageRef
    from sforge.scores.folders import task_definition

    bench = load_benchmark(FIXTURES / "minibench")
    task = bench.tasks["alpha"]
    judge = ImageRef("judge", "alpha", "0123456789ab", f"{bench.name}.judge.alpha")
    before = task_definition(bench, task, judge)
    monkeypatch.setattr(results, "GRADING_CONTRACT", results.GRADING_CONTRACT + 1)
    assert task_definition(bench, task, judge) != before


def test_plan_counts_what_it_will_regrade(tmp_path):
    """Results under an older key (another contract, judge or settings) of an archive that
    is graded again count as re-grades; new archives do not."""
    copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    for source in ("old", "new"):
        archive(tmp_path / "bench" / "submissions" / source / "gamma" / "run1.tar.gz",
                {"answer.txt": source})
    config = user_config(None, {"benchmark": str(tmp_path / "bench"),
                                "results": str(tmp_path / "results")})
    pipe = Pipeline.from_config(config)
    old = next(s for s in pipe.submissions() if s.source == "old")
    stale = pipe.layout.eval_result("gamma", "f" * 20)  # graded under another key
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"task": "gamma", "submission": old.sha256, "valid": True}))
    plan = plan_grading(pipe, ["gamma"])
    assert len(plan.pending) == 2 and plan.regrade == 1
    out = subprocess.run([sys.executable, "-m", "sforge", "-b", str(tmp_path / "bench"),
                          "--results", str(tmp_path / "results"), "plan", "--task", "gamma"],
                         capture_output=True, text=True)
    assert "2 of 2 result(s) to grade (1 re-grade" in out.stdout, out.stdout + out.stderr


@pytest.mark.docker
def test_eval_with_a_timeout_override_is_an_experiment(minibench, tmp_path):
    """The override's verdict is kept under its own key and shown, but the
    archive does not join the submissions the leaderboard grades."""
    minibench.run("build", "--task", "gamma", check=True)
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "3"})
    proc = minibench.run("eval", "--task", "gamma", "--archive", str(sub), "--timeout", "7",
                         "--json", check=True)
    assert "experiment" in proc.stderr
    view = json.loads(proc.stdout)
    assert view["judge_settings"]["timeout_sec"] == 7
    assert Path(minibench.results / minibench.name / "evals" / "gamma" /
                f"{view['key']}.json").is_file()
    graded = minibench.run("grade", check=True)
    assert "0 submission(s)" in graded.stdout, graded.stdout
    plain = minibench.run("eval", "--task", "gamma", "--archive", str(sub), "--json",
                          check=True)
    assert json.loads(plain.stdout)["key"] != view["key"]
    assert "1 submission(s)" in minibench.run("grade", check=True).stdout


@pytest.mark.docker
def test_judge_local_uses_the_same_limits_and_key(minibench, tmp_path):
    """Config's archive_limits apply, and --timeout is in the key, which is the
    key `sforge eval --timeout` gives."""
    minibench.run("build", "--task", "gamma", check=True)
    tool = [sys.executable, str(REPO / "tools" / "judge_local.py"),
            str(minibench.bench / "tasks" / "gamma")]
    two = archive(tmp_path / "two.tar.gz", {"answer.txt": "3", "notes.txt": "x"})
    strict = tmp_path / "strict.yaml"
    strict.write_text("archive_limits:\n  max_members: 1\n")
    proc = subprocess.run([*tool, str(two), "--config", str(strict)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert not out["valid"] and "exceeds 1 members" in out["reason"], out
    proc = subprocess.run([*tool, str(two), "--timeout", "7"], capture_output=True, text=True)
    local = json.loads(proc.stdout)
    task = load_benchmark(minibench.bench).tasks["gamma"]
    assert local["key"] == eval_key(local["judge_image"], local["submission"],
                                    judged_task(task, 7).judge_settings())
    evaluated = minibench.run("eval", "--task", "gamma", "--archive", str(two), "--timeout",
                              "7", "--json", check=True)
    assert json.loads(evaluated.stdout)["key"] == local["key"]


_OPENS: list[str] = []
_WATCH: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _WATCH and isinstance(args[0], str | bytes | Path):
        path = str(args[0] if not isinstance(args[0], bytes) else args[0].decode())
        if path.startswith(_WATCH[0]) and path.endswith(".tar.gz"):
            _OPENS.append(path)


@pytest.mark.docker
def test_grading_reads_the_archive_once_to_hash_and_once_to_filter(minibench, tmp_path,
                                                                    capsys):
    """`sforge eval` hashes the archive while storing it and reads the stored
    copy once, to filter it; the result carries the target's key and sha unpatched."""
    from sforge.cli.main import main

    minibench.run("build", "--task", "gamma", check=True)
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "4"})
    store = str(minibench.results / minibench.name / "submissions")
    sys.addaudithook(_audit)
    _OPENS.clear()
    _WATCH[:] = [store]
    try:
        rc = main(["-b", str(minibench.bench), "--results", str(minibench.results), "eval",
                   "--task", "gamma", "--archive", str(sub), "--json"])
    finally:
        _WATCH.clear()
    assert rc == 0
    view = json.loads(capsys.readouterr().out)
    stored = [p for p in _OPENS if not Path(p).name.startswith(".")]
    assert len(stored) == 1, _OPENS  # the filter's read; its hash came from storing it
    assert view["submission"] == Path(stored[0]).name.split(".")[0]
