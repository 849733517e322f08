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
    before = eval_key("b.judge.t:0123456789ab", "0" * 64, {"timeout_sec": 5}, limits={})
    monkeypatch.setattr(results, "GRADING_CONTRACT", results.GRADING_CONTRACT + 1)
    assert eval_key("b.judge.t:0123456789ab", "0" * 64, {"timeout_sec": 5},
                    limits={}) != before


def test_report_caches_follow_the_contract(monkeypatch):
    """A task's report fingerprint depends on what keys its results: after a contract bump
    `sforge report` must not serve tables made from results under the old contract."""
    from sforge.benchmark.images import ImageRef
    from sforge.scores.folders import task_definition

    bench = load_benchmark(FIXTURES / "minibench")
    task = bench.tasks["alpha"]
    judge = ImageRef("judge", "alpha", "0123456789ab", f"{bench.name}.judge.alpha")
    before = task_definition(bench, task, judge, limits={})
    monkeypatch.setattr(results, "GRADING_CONTRACT", results.GRADING_CONTRACT + 1)
    assert task_definition(bench, task, judge, limits={}) != before


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


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} \
        if root.is_dir() else set()


@pytest.mark.docker
def test_report_after_an_experiment_grades_nothing(minibench, tmp_path):
    """On a benchmark without submissions, `sforge eval --timeout 15` (the task's own
    timeout is 20) then `sforge report`: the report starts no judge, writes no result, and
    its tables count no submission."""
    toml = minibench.bench / "tasks" / "gamma" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 30", "timeout_sec = 20"))
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "3"})
    proc = minibench.run("eval", "--task", "gamma", "--archive", str(sub), "--timeout", "15",
                         "--json", check=True)
    view = json.loads(proc.stdout)
    assert view["valid"] and view["judge_settings"]["timeout_sec"] == 15
    root = minibench.results / minibench.name
    evals = _files(root / "evals")
    assert evals == {f"gamma/{view['key']}.json", f"gamma/{view['key']}.log"}
    assert _files(root / "submissions") == set()
    report = minibench.run("report", "-v", check=True)
    assert "to grade" not in report.stderr and "gamma  manual" not in report.stderr, \
        report.stderr
    assert _files(root / "evals") == evals  # no judge ran: no result or log was written
    assert "No graded submissions yet." in report.stdout, report.stdout
    for table in ("scores.csv", "leaderboard.csv"):
        assert len((root / table).read_text().splitlines()) == 1, table  # the header only


@pytest.mark.docker
@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_eval_refuses_a_timeout_that_is_not_a_positive_number(minibench, tmp_path, timeout):
    """`--timeout` is a wall clock in seconds (> 0, finite, as [judge] timeout_sec): any
    other value is a usage error (exit 2), and nothing is stored or graded (`--timeout 0` was
    dropped, the archive stored among the leaderboard's submissions and graded under the
    task's own timeout)."""
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "3"})
    proc = minibench.run("eval", "--task", "gamma", "--archive", str(sub),
                         f"--timeout={timeout}", "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["kind"] == "usage" and "--timeout" in out["error"], out
    assert "Traceback" not in proc.stderr, proc.stderr
    root = minibench.results / minibench.name
    for folder in ("submissions", "experiments", "evals"):
        assert _files(root / folder) == set(), folder


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
                                    judged_task(task, 7).judge_settings(), limits={})
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


# -- the configuration's limits in the key -----------------------------------------------------
SHA = "ab" * 32
# Each changes what a judge run can decide: a refused archive, a fork that fails, a full disk.
VERDICT_LIMITS = [{"archive_limits": {"max_members": 1}},
                  {"archive_limits": {"max_bytes": 4096}},
                  {"judge_limits": {"pids": 64}},
                  {"judge_limits": {"writable": "1g"}},
                  {"judge_limits": {"writable": None}}]


def _pipe(tmp_path: Path, limits: dict) -> Pipeline:
    bench = tmp_path / "bench"
    if not bench.exists():
        copy_bench(FIXTURES / "minibench", bench)
    return Pipeline.from_config(user_config(None, {"benchmark": str(bench),
                                                   "results": str(tmp_path / "results"),
                                                   **limits}))


def _old_key(pipe: Pipeline, task: str, sha: str) -> str:
    """The key as sforge made it before the configuration's limits joined it: the hash of
    exactly {contract, judge, settings, submission}."""
    import hashlib

    material = {"contract": results.GRADING_CONTRACT, "judge": pipe.refs[task]["judge"].tag,
                "settings": pipe.bench.tasks[task].judge_settings(), "submission": sha}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:20]


def test_a_verdict_limit_changes_the_key_everywhere_it_is_made(tmp_path):
    """Two configurations that differ only in a limit that can move a verdict key the same
    archive differently: the eval target, the batch's result paths and the report cache's
    task definition all follow it."""
    from sforge.scores.folders import task_definition

    def made(pipe: Pipeline) -> tuple[str, str, str]:
        key = pipe.eval_target("gamma", SHA, tmp_path / "a.tar.gz").key
        keyer = results.eval_keyer(pipe.refs["gamma"]["judge"].tag,
                                   pipe.bench.tasks["gamma"].judge_settings(),
                                   limits=pipe.key_limits)
        return key, keyer(SHA), task_definition(pipe.bench, pipe.bench.tasks["gamma"],
                                                pipe.refs["gamma"]["judge"],
                                                limits=pipe.key_limits)

    default = made(_pipe(tmp_path, {}))
    seen = {default[0]}
    for limits in VERDICT_LIMITS:
        other = made(_pipe(tmp_path, limits))
        assert other[0] == other[1], limits
        assert other[0] not in seen, f"{limits} keys as another configuration does"
        assert other[2] != default[2], limits
        seen.add(other[0])


def test_the_default_limits_keep_every_key_as_it_was(tmp_path):
    """At their defaults, stated or not, the limits add nothing to the key: an upgrade
    re-grades nothing. A limit written another way with the same meaning keys the same."""
    assert eval_key("b.judge.t:0123456789ab", "0" * 64, {"timeout_sec": 5},
                    limits={}) == "6a544bc88da1bdbfe79f"  # made before the limits joined
    pipe = _pipe(tmp_path, {})
    assert pipe.key_limits == {}
    assert pipe.eval_target("gamma", SHA, tmp_path / "a.tar.gz").key == \
        _old_key(pipe, "gamma", SHA)
    stated = _pipe(tmp_path, {"archive_limits": {"max_members": 10_000, "max_bytes": 1 << 30},
                              "judge_limits": {"pids": 4096, "writable": "10G"}})
    assert stated.key_limits == {}
    assert stated.eval_target("gamma", SHA, tmp_path / "a.tar.gz").key == \
        _old_key(pipe, "gamma", SHA)
    one = _pipe(tmp_path, {"judge_limits": {"writable": "1g", "pids": 64}})
    same = _pipe(tmp_path, {"judge_limits": {"pids": 64, "writable": "1024m"}})
    assert one.eval_target("gamma", SHA, tmp_path / "a.tar.gz").key == \
        same.eval_target("gamma", SHA, tmp_path / "a.tar.gz").key


def test_the_judge_keys_a_refused_archive_with_its_limits(tmp_path):
    """run_judge, given no key, makes the one the pipeline makes under the same limits (a
    refused archive needs no container, so no engine is asked)."""
    from sforge.grading.contract import archive_limits, container_limits
    from sforge.grading.judge import run_judge

    strict = {"archive_limits": {"max_members": 1}, "judge_limits": {"pids": 64}}
    pipe = _pipe(tmp_path, strict)
    two = archive(tmp_path / "two.tar.gz", {"answer.txt": "3", "notes.txt": "x"})
    import hashlib

    sha = hashlib.sha256(two.read_bytes()).hexdigest()
    r = run_judge(None, pipe.refs["gamma"]["judge"].tag, pipe.bench.tasks["gamma"], two,
                  limits=archive_limits(pipe.config),
                  container_limits=container_limits(pipe.config))
    assert not r.valid and "exceeds 1 members" in (r.reason or "")
    assert r.key == pipe.eval_target("gamma", sha, two).key != _old_key(pipe, "gamma", sha)


@pytest.mark.docker
def test_a_changed_limit_regrades_and_the_old_result_comes_back(minibench, tmp_path):
    """Grade; grade under a --config with a stricter archive limit: the archive is graded
    again under a new key, and `snakemake`, `sforge eval` and judge_local make that key
    too; back to the default limits: nothing is judged, the first result serves again."""
    from tests.helpers.benches import results_of

    sub = archive(minibench.bench / "submissions" / "s1" / "gamma" / "run1.tar.gz",
                  {"answer.txt": "3", "notes.txt": "x"})
    evals = minibench.results / minibench.name / "evals" / "gamma"
    plain, strict = tmp_path / "plain.yaml", tmp_path / "strict.yaml"
    plain.write_text("archive_limits: {}\n")
    strict.write_text("archive_limits:\n  max_members: 1\n")

    first = minibench.run("grade", "--config", str(plain), check=True)
    assert "1 graded" in first.stdout, first.stdout
    (old,) = evals.glob("*.json")
    old_text = old.read_text()
    assert json.loads(old_text)["valid"] is True

    second = minibench.run("grade", "--config", str(strict), check=True)
    assert "1 graded" in second.stdout, second.stdout
    (new,) = set(evals.glob("*.json")) - {old}
    verdict = json.loads(new.read_text())
    assert not verdict["valid"] and "exceeds 1 members" in verdict["reason"], verdict
    assert old.read_text() == old_text
    graded = results_of(minibench)

    snake = subprocess.run(
        [sys.executable, "-m", "snakemake", "grade", "--cores", "1", "--configfile",
         str(strict), "--config", f"benchmark={minibench.bench}",
         f"results={minibench.results}"], cwd=REPO, capture_output=True, text=True)
    assert snake.returncode == 0, snake.stderr[-3000:]
    evaluated = minibench.run("eval", "--config", str(strict), "--task", "gamma",
                              "--archive", str(sub), "--json")
    assert evaluated.returncode == 1, evaluated.stderr  # the verdict is INVALID
    assert json.loads(evaluated.stdout)["key"] == new.stem
    assert "already graded" in evaluated.stderr
    local = subprocess.run([sys.executable, str(REPO / "tools" / "judge_local.py"),
                            str(minibench.bench / "tasks" / "gamma"), str(sub),
                            "--config", str(strict)], capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["key"] == new.stem
    assert results_of(minibench) == graded

    back = minibench.run("grade", "--config", str(plain), check=True)
    assert "0 graded" in back.stdout, back.stdout
    assert results_of(minibench) == graded and old.read_text() == old_text
