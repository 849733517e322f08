"""Unit: loading benchmark.toml and task.toml, and every validation error (no Docker).

Each directory under fixtures/loader/ with an expected.toml is one broken benchmark: a good
task `ok` beside one broken task. The error must name the file, the field and the problem,
and the good task must still load (one broken task never hides the others).
"""

from __future__ import annotations

import datetime
import os
import shutil
import time
import tomllib
from pathlib import Path

import pytest

import sforge.benchmark.loader
from sforge.benchmark.hashing import HashCache
from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import Blob, Environment, Judge, Score, SubmissionRules
from sforge.core.errors import DefinitionError
from tests.helpers import paths

FIXTURES = paths.FIXTURES / "loader"
VALID = FIXTURES / "valid"
CASES = sorted(d for d in FIXTURES.iterdir() if (d / "expected.toml").is_file())


def _expected(case: Path) -> dict:
    with (case / "expected.toml").open("rb") as fh:
        return tomllib.load(fh)


def test_every_fixture_states_its_expectation():
    """A broken fixture without expected.toml would silently not be tested."""
    dirs = {d.name for d in FIXTURES.iterdir() if d.is_dir()}
    assert dirs - {c.name for c in CASES} == {"valid"}
    assert len(CASES) >= 30


def _assert_names(exc: DefinitionError, case: Path, want: dict) -> None:
    assert exc.path == case / want["file"], f"error names {exc.path}, expected {want['file']}"
    assert exc.field == (want["field"] or None)
    assert want["message"] in exc.message, f"{exc.message!r} lacks {want['message']!r}"
    # What the user reads in the terminal names all three.
    text = str(exc)
    assert str(case / want["file"]) in text
    assert want["message"] in text
    if want["field"]:
        assert f"[{want['field']}]" in text


@pytest.mark.parametrize("cached", [False, True], ids=["plain", "cached"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_fixture(case: Path, cached: bool, tmp_path):
    want = _expected(case)
    cache = HashCache(tmp_path / "hashes.json") if cached else None
    if want.get("raises"):
        with pytest.raises(DefinitionError) as info:
            load_benchmark(case, cache)
        _assert_names(info.value, case, want)
        assert info.value.task is None
        return
    bench = load_benchmark(case, cache)
    if cache is not None:
        # An error is never cached: a reloaded cache finds it again.
        cache.save()
        bench = load_benchmark(case, HashCache(tmp_path / "hashes.json"))
    assert len(bench.errors) == 1, [str(e) for e in bench.errors]
    exc = bench.errors[0]
    assert isinstance(exc, DefinitionError)
    assert exc.task == want["task"]
    _assert_names(exc, case, want)
    # The broken task is left out; the good one beside it loads.
    assert set(bench.tasks) == {"ok"}
    assert bench.tasks["ok"].judge.cmd == "sh /judge/run.sh"


def test_benchmark_errors_collect_every_broken_task(tmp_path):
    """Several broken tasks in one benchmark: one error each, good tasks still load."""
    root = tmp_path / "bench"
    shutil.copytree(VALID, root)
    for case in ("type_timeout_sec", "unknown_base", "missing_task_toml"):
        shutil.copytree(FIXTURES / case / "tasks" / "bad", root / "tasks" / f"bad_{case}")
    # The copied tasks keep id = "bad", so rename the ids to match their new directories.
    for d in (root / "tasks").glob("bad_*"):
        toml = d / "task.toml"
        if toml.is_file():
            toml.write_text(toml.read_text().replace('id = "bad"', f'id = "{d.name}"'))
    bench = load_benchmark(root)
    assert set(bench.tasks) == {"full", "minimal", "inherit"}
    by_task = {e.task: e for e in bench.errors}
    assert set(by_task) == {"bad_type_timeout_sec", "bad_unknown_base", "bad_missing_task_toml"}
    assert by_task["bad_type_timeout_sec"].field == "judge.timeout_sec"
    assert by_task["bad_unknown_base"].field == "environment.base"
    assert by_task["bad_missing_task_toml"].message == "file not found"


def test_valid_task_every_field():
    bench = load_benchmark(VALID)
    assert bench.errors == []
    assert bench.name == "fixture"
    assert bench.registry == "docker.io/example"
    assert bench.blob_url == "https://example.org/blobs/"
    assert bench.root == VALID.resolve()
    assert bench.bases == {"cpp": VALID / "bases" / "cpp"}
    # Hidden directories and plain files under tasks/ are not tasks.
    assert sorted(bench.tasks) == ["full", "inherit", "minimal"]

    t = bench.tasks["full"]
    assert t.id == "full"
    assert t.dir == VALID / "tasks" / "full"
    assert t.toml_path == VALID / "tasks" / "full" / "task.toml"
    assert t.name == "Full Task"
    assert t.version == "1.2.3"
    assert t.environment == Environment(base="cpp", platform="linux/amd64",
                                        cwd="/home/workspace/full", internet=True, cpus=4,
                                        memory="16g")
    assert t.submission == SubmissionRules(paths=("solution.cpp", "notes/"),
                                           exclude=("*.o", "build/"))
    assert t.judge == Judge(cmd="bash /judge/run.sh", timeout_sec=900, internet=True, cpus=2,
                            memory="8g")
    assert t.score == Score(direction="minimize",
                            rescale={"kind": "piecewise_max", "baseline": 0.0, "rank30": 10.0,
                                     "rank1": 20.0, "super_anchor": 30.0})
    # Blob paths are normalized ("./environment/..." -> "environment/...").
    assert t.blobs == (
        Blob("judge/blobs/hidden.tar.gz", "0123456789abcdef" * 4),
        Blob("environment/blobs/data.tar.gz", ("0123456789abcdef" * 4)[::-1]),
    )
    assert t.game == {"server_cmd": "python3 /judge/server.py"}
    # Keys sforge does not read are free-form metadata, kept as written.
    assert t.metadata == {"category": "optimization", "status": "active", "tags": ["a", "b"]}
    assert t.category == "optimization"
    assert t.judge_settings() == {
        "cmd": "bash /judge/run.sh", "timeout_sec": 900, "cpus": 2, "memory": "8g",
        "internet": True, "cwd": "/home/workspace/full",
        "paths": ["solution.cpp", "notes/"], "exclude": ["*.o", "build/"],
    }


def test_valid_task_defaults():
    t = load_benchmark(VALID).tasks["minimal"]
    assert t.name == "minimal"  # the id when no name is given
    assert t.version == "0.0.0"
    assert t.environment == Environment()
    assert t.environment.base is None
    assert t.environment.cwd == "/home/workspace"
    assert t.environment.internet is False
    assert t.submission.paths == (".",)
    assert t.submission.exclude == ()
    assert t.judge.timeout_sec == 600
    assert t.judge.internet is False
    assert t.judge.cpus == 1.0
    assert t.judge.memory == "2g"
    assert t.score.direction == "maximize"
    assert t.score.rescale is None
    assert t.blobs == ()
    assert t.game is None
    assert t.metadata == {}
    assert t.category is None


def test_judge_inherits_environment_limits():
    t = load_benchmark(VALID).tasks["inherit"]
    assert (t.environment.cpus, t.environment.memory) == (3, "6g")
    assert (t.judge.cpus, t.judge.memory) == (3, "6g")
    # ...but its own values win (see the full task: environment 4/16g, judge 2/8g).
    full = load_benchmark(VALID).tasks["full"]
    assert (full.judge.cpus, full.judge.memory) == (2, "8g")


def test_select():
    bench = load_benchmark(VALID)
    assert [t.id for t in bench.select(None)] == ["full", "inherit", "minimal"]
    assert [t.id for t in bench.select(["minimal", "nope", "full"])] == ["minimal", "full"]


def test_missing_benchmark_dir(tmp_path):
    with pytest.raises(DefinitionError) as info:
        load_benchmark(tmp_path / "nowhere")
    assert info.value.path == tmp_path / "nowhere"
    assert "benchmark directory not found" in info.value.message


def test_missing_benchmark_toml(tmp_path):
    (tmp_path / "tasks").mkdir()
    with pytest.raises(DefinitionError) as info:
        load_benchmark(tmp_path)
    assert info.value.path == tmp_path / "benchmark.toml"
    assert info.value.message == "file not found"


def test_missing_tasks_dir(tmp_path):
    (tmp_path / "benchmark.toml").write_text('name = "x"\n')
    with pytest.raises(DefinitionError) as info:
        load_benchmark(tmp_path)
    assert info.value.path == tmp_path / "tasks"
    assert "tasks/" in info.value.message


def test_base_without_dockerfile_is_not_a_base(tmp_path):
    root = tmp_path / "bench"
    shutil.copytree(VALID, root)
    (root / "bases" / "cpp" / "Dockerfile").rename(root / "bases" / "cpp" / "Dockerfile.old")
    bench = load_benchmark(root)
    assert bench.bases == {}
    [err] = bench.errors
    assert (err.task, err.field) == ("full", "environment.base")
    assert "(bases found: none)" in err.message


# ---------------------------------------------------------------------------- parse cache


def _old_copy(src: Path, dest: Path) -> Path:
    """A copy of a benchmark whose files were last modified an hour ago (not racily clean)."""
    shutil.copytree(src, dest)
    old = time.time() - 3600
    for dirpath, _, filenames in os.walk(dest):
        for name in filenames:
            os.utime(os.path.join(dirpath, name), (old, old))
    return dest


@pytest.fixture
def toml_reads(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = sforge.benchmark.loader._read_toml

    def counting(path, task):
        seen.append(path)
        return real(path, task)

    monkeypatch.setattr(sforge.benchmark.loader, "_read_toml", counting)
    return seen


def test_parse_cache_gives_the_same_tasks_without_reading(tmp_path, toml_reads):
    root = _old_copy(VALID, tmp_path / "bench")
    plain = load_benchmark(root)
    path = tmp_path / "hashes.json"
    cache = HashCache(path, salt="v1")
    first = load_benchmark(root, cache)
    cache.save()
    toml_reads.clear()
    second = load_benchmark(root, HashCache(path, salt="v1"))
    # Only benchmark.toml is read: every task.toml comes from the cache.
    assert toml_reads == [root / "benchmark.toml"]
    assert first.tasks == plain.tasks == second.tasks
    # Another salt (another sforge version) parses again.
    toml_reads.clear()
    assert load_benchmark(root, HashCache(path, salt="v2")).tasks == plain.tasks
    assert len(toml_reads) == 4


def test_parse_cache_sees_an_edit(tmp_path):
    root = _old_copy(VALID, tmp_path / "bench")
    path = tmp_path / "hashes.json"
    cache = HashCache(path)
    assert load_benchmark(root, cache).tasks["minimal"].judge.timeout_sec == 600
    cache.save()
    toml = root / "tasks" / "minimal" / "task.toml"
    st = toml.stat()
    toml.write_text(toml.read_text() + "timeout_sec = 60\n")  # into [judge]
    os.utime(toml, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime
    bench = load_benchmark(root, HashCache(path))
    assert bench.tasks["minimal"].judge.timeout_sec == 60
    # An edit that breaks the task is an error at once, whatever the cache held.
    toml.write_text(toml.read_text().replace("timeout_sec = 60", 'timeout_sec = "soon"'))
    bench = load_benchmark(root, HashCache(path))
    assert [(e.task, e.field) for e in bench.errors] == [("minimal", "judge.timeout_sec")]


def test_parse_cache_with_toml_dates(tmp_path):
    """TOML dates are fine free-form metadata, though JSON cannot hold them."""
    root = _old_copy(VALID, tmp_path / "bench")
    toml = root / "tasks" / "minimal" / "task.toml"
    st = toml.stat()
    toml.write_text("added = 2025-03-01\n" + toml.read_text())
    os.utime(toml, ns=(st.st_atime_ns, st.st_mtime_ns))
    path = tmp_path / "hashes.json"
    cache = HashCache(path)
    bench = load_benchmark(root, cache)
    assert bench.tasks["minimal"].metadata == {"added": datetime.date(2025, 3, 1)}
    cache.save()  # must not fail
    again = load_benchmark(root, HashCache(path))
    assert again.tasks["minimal"].metadata == {"added": datetime.date(2025, 3, 1)}
    assert again.tasks == bench.tasks


def test_keep_metadata_joins_the_eval_key_only_when_narrowed(tmp_path: Path) -> None:
    """The default keeps every eval key as it was; narrowing changes what the judge sees, so
    it changes the key."""
    import dataclasses

    task = sforge.benchmark.loader.load_task(FIXTURES / "type_internet" / "tasks" / "ok", bases={})
    assert "keep_metadata" not in task.judge_settings()
    narrowed = dataclasses.replace(task, submission=SubmissionRules(keep_metadata=("mode",)))
    assert narrowed.judge_settings()["keep_metadata"] == ["mode"]
