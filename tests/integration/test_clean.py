"""`sforge clean` removes only what nothing refers to: experiments (`sforge eval --timeout`)
keep their results, logs and archives, a grade in progress keeps its claim, history/ stays;
an experiment under an old judge, a dead claim and the archives of a gone task go."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from sforge.benchmark.submissions import store_archive
from sforge.commands.clean import find_files
from sforge.containers import owner
from sforge.core.config import user_config
from sforge.grading.claims import try_claim
from sforge.grading.contract import judged_task
from sforge.grading.results import EvalResult, eval_key, retire
from sforge.plan.pipeline import Pipeline
from tests.helpers.archives import archive
from tests.helpers.benches import copy_bench
from tests.helpers.paths import FIXTURES


def _pipeline(tmp_path: Path) -> Pipeline:
    config = user_config(None, {"benchmark": str(tmp_path / "bench"),
                                "results": str(tmp_path / "results")})
    return Pipeline.from_config(config)


@pytest.fixture
def bench(tmp_path):
    copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    return tmp_path


def _experiment(pipe: Pipeline, tmp_path: Path, timeout: float, answer: str = "3",
                judge_tag: str | None = None) -> tuple[Path, Path, Path]:
    """An archive stored as `sforge eval --timeout` stores it, and its result and log under
    the key that eval gives (or, with `judge_tag`, the key another judge gave)."""
    raw = archive(tmp_path / f"exp-{answer}.tar.gz", {"answer.txt": answer}).read_bytes()
    sub = store_archive(pipe.layout.experiments, "manual", "gamma", io.BytesIO(raw), "now")
    task = judged_task(pipe.bench.tasks["gamma"], timeout)
    tag = judge_tag or pipe.refs["gamma"]["judge"].tag
    key = eval_key(tag, sub.sha256, task.judge_settings(), limits=pipe.key_limits)
    path = pipe.layout.eval_result("gamma", key)
    EvalResult(task="gamma", submission=sub.sha256, key=key, valid=True, score=3.0,
               summary="answer 3", judge_image=tag,
               judge_settings=task.judge_settings()).write(path)
    log = pipe.layout.eval_log("gamma", key)
    log.write_text("judge output\n")
    return sub.path, path, log


def _listed(pipe: Pipeline) -> set[str]:
    return {g.what for g in find_files(pipe)}


def test_clean_keeps_an_experiments_result_log_and_archive(bench):
    pipe = _pipeline(bench)
    stored, result, log = _experiment(pipe, bench, 7)
    listed = _listed(pipe)
    assert str(result) not in listed and str(log) not in listed, listed
    assert str(stored) not in listed and str(stored.with_suffix("").with_suffix(".json")) \
        not in listed, listed


def test_clean_keeps_an_experiment_at_the_tasks_own_timeout(bench):
    """`--timeout` equal to the task's own is still an experiment, under its own key."""
    pipe = _pipeline(bench)
    own = pipe.bench.tasks["gamma"].judge.timeout_sec
    _, result, log = _experiment(pipe, bench, own)
    assert not {str(result), str(log)} & _listed(pipe)


def test_clean_removes_an_experiment_graded_by_an_old_judge(bench):
    """An experiment's result is kept while the current judge would find it (as for any
    submission): one graded by another judge image is unreferenced."""
    pipe = _pipeline(bench)
    _, kept, _ = _experiment(pipe, bench, 7)
    old_tag = pipe.refs["gamma"]["judge"].tag.rsplit(":", 1)[0] + ":000000000000"
    stored, old, old_log = _experiment(pipe, bench, 7, judge_tag=old_tag)
    listed = _listed(pipe)
    assert str(old) in listed and str(old_log) in listed, listed
    assert str(kept) not in listed and str(stored) not in listed


def test_clean_keeps_a_claim_in_progress_and_removes_a_dead_one(bench):
    """A claim held by a live grade (an experiment being judged has no result yet) stays;
    one whose owner is gone and whose deadline passed is removed."""
    pipe = _pipeline(bench)
    live = pipe.layout.eval_claim("gamma", "a" * 20)
    assert try_claim(live, 600) is not None
    dead = pipe.layout.eval_claim("gamma", "b" * 20)
    dead.write_text(json.dumps({**owner.identity(), "pid": 2 ** 22 + 1, "token": "t",
                                "deadline": time.time() - 60}))
    listed = _listed(pipe)
    assert str(live) not in listed, listed
    assert str(dead) in listed, listed


def test_clean_keeps_history(bench):
    """Results set aside by a regrade are kept in history/."""
    pipe = _pipeline(bench)
    _, result, log = _experiment(pipe, bench, 7)
    moved = retire(result)
    assert moved is not None and moved.exists() and moved.with_suffix(".log").exists()
    listed = _listed(pipe)
    assert not any("/history/" in path for path in listed), listed
    assert moved.parent.is_dir()


def test_clean_removes_the_experiments_of_a_gone_task(bench):
    """As for the submissions' store: the archives of a task no longer in the benchmark go,
    with its results."""
    pipe = _pipeline(bench)
    stored, result, _ = _experiment(pipe, bench, 7)
    shutil.rmtree(bench / "bench" / "tasks" / "gamma")
    pipe = _pipeline(bench)
    listed = _listed(pipe)
    assert str(stored) in listed and str(result) in listed, listed
    assert os.fspath(stored.with_name(stored.name.split(".")[0] + ".json")) in listed


@pytest.mark.docker
def test_clean_yes_keeps_an_experiment_graded_by_sforge_eval(minibench, tmp_path):
    """Real judge: after `sforge eval --timeout`, `sforge clean --yes` leaves the result,
    its log and the archive, and the same eval again finds its result."""
    minibench.run("build", "--task", "gamma", check=True)
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "3"})
    args = ("eval", "--task", "gamma", "--archive", str(sub), "--timeout", "7", "--json")
    view = json.loads(minibench.run(*args, check=True).stdout)
    root = minibench.results / minibench.name
    result = root / "evals" / "gamma" / f"{view['key']}.json"
    kept = [result, result.with_suffix(".log"),
            *(root / "experiments" / "manual" / "gamma").iterdir()]
    assert len(kept) == 4
    listed = minibench.run("clean", check=True)
    assert "/evals/gamma/" not in listed.stdout and "/experiments/" not in listed.stdout, \
        listed.stdout
    minibench.run("clean", "--yes", check=True)
    assert all(p.exists() for p in kept), [p for p in kept if not p.exists()]
    again = minibench.run(*args, check=True)
    assert "already graded" in again.stderr, again.stderr
    assert json.loads(again.stdout)["key"] == view["key"]
