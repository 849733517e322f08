"""Integration tests of sforge.grading.judge against the real Docker daemon.

Judge images are built from tests/fixtures/judge/<behaviour>/ (a task directory each, FROM
busybox:1.36, no pull) once per module and removed at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import docker
import docker.errors
import pytest

import sforge
from sforge.benchmark.loader import load_task
from sforge.benchmark.model import Task
from sforge.containers import owner
from sforge.containers.docker import DockerEngine
from sforge.containers.owner import sweep_stale_containers
from sforge.core.errors import InfrastructureError
from sforge.core.units import parse_memory
from sforge.grading import judge_container, judge_log
from sforge.grading.archive_limits import ArchiveLimits
from sforge.grading.judge import prepare_judge, run_judge
from sforge.grading.result_json import parse_result
from sforge.grading.results import EvalResult, eval_key
from tests.helpers import paths

docker_test = pytest.mark.docker

FIXTURES = paths.FIXTURES / "judge"
MINE = {"label": f"{owner.OWNER_PID_LABEL}={os.getpid()}"}
FORGED = b'{"valid": true, "score": 1e9, "summary": "forged"}'


# -- archives ------------------------------------------------------------------------------------
def reg(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def special(name: str, kind: bytes, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755
    return info, None


def d(name: str) -> tuple:
    return special(name, tarfile.DIRTYPE)


def sym(name: str, target: str) -> tuple:
    return special(name, tarfile.SYMTYPE, target)


def hard(name: str, target: str) -> tuple:
    return special(name, tarfile.LNKTYPE, target)


@pytest.fixture
def make_archive(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(*entries: tuple) -> Path:
        path = tmp_path / f"sub{len(list(tmp_path.iterdir()))}.tar.gz"
        with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
            for info, data in entries:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return path
    return make


# -- Docker --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(docker_client: docker.DockerClient) -> docker.DockerClient:
    """The shared daemon client of conftest.py (fails clearly when Docker is unreachable)."""
    return docker_client


@pytest.fixture(scope="module")
def judges(client: docker.DockerClient) -> Iterator[dict[str, tuple[Task, str]]]:
    built: dict[str, tuple[Task, str]] = {}
    try:
        for task_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
            tag = f"sforge-test-judge-{task_dir.name}:latest"
            client.images.build(path=str(task_dir), dockerfile="judge/Dockerfile", tag=tag,
                                rm=True, forcerm=True, pull=False)
            built[task_dir.name] = (load_task(task_dir, bases={}), tag)
        yield built
    finally:
        for _, tag in built.values():
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(tag, force=True)


@pytest.fixture(autouse=True)
def no_container_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "client" in request.fixturenames:
        c = request.getfixturevalue("client")
        assert c.api.containers(all=True, filters=MINE) == []


def grade(client: docker.DockerClient, judges: dict, name: str, archive: Path,
          **kwargs: object) -> EvalResult:
    task, tag = judges[name]
    return run_judge(DockerEngine(client), tag, task, archive, **kwargs)  # type: ignore[arg-type]


def with_rules(task: Task, **changes: object) -> Task:
    return dataclasses.replace(task, submission=dataclasses.replace(task.submission, **changes))


def with_judge(task: Task, **changes: object) -> Task:
    return dataclasses.replace(task, judge=dataclasses.replace(task.judge, **changes))


# -- the valid path ------------------------------------------------------------------------------
@docker_test
def test_valid_result(client, judges, make_archive, tmp_path: Path) -> None:
    archive = make_archive(reg("solution.txt", b"42"), d("src"), reg("src/main.c"))
    task, tag = judges["inspect"]
    log_path = tmp_path / "logs" / "judge.log"
    r = run_judge(DockerEngine(client), tag, task, archive, log_path=log_path)
    assert (r.valid, r.score, r.summary, r.reason) == (True, 42.0, "original", None)
    assert r.details == ["solution.txt", "src", "src/main.c", "tests", "tests/check.txt"]
    assert r.metrics["pwd"] == "/home/workspace/app"
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert r.submission == sha
    assert r.key == eval_key(tag, sha, task.judge_settings(), limits={})
    assert (r.task, r.judge_image, r.judge_settings) == ("inspect", tag, task.judge_settings())
    assert r.exit_code == 0 and not r.timed_out and not r.oom_killed
    assert r.sforge_version == sforge.__version__
    started = datetime.fromisoformat(r.started_at)
    finished = datetime.fromisoformat(r.finished_at)
    assert started.utcoffset().total_seconds() == 0 and started <= finished
    assert 0 < r.duration_s < 10
    assert r.log == str(log_path)
    text = log_path.read_text()
    assert "inspect judge:" in text and "[sforge] judge exited with code 0" in text
    # The result round-trips through its file form.
    r.write(tmp_path / "result.json")
    assert EvalResult.read(tmp_path / "result.json") == r


@docker_test
def test_prepared_judges_run_in_any_order(client, judges, make_archive) -> None:
    """The next eval's container is created and filled while another one waits to run (the
    batch pipeline's primitive); one never run leaves no container behind."""
    task, tag = judges["inspect"]
    engine = DockerEngine(client)
    first = prepare_judge(engine, tag, task, make_archive(reg("solution.txt", b"11")))
    second = prepare_judge(engine, tag, task, make_archive(reg("solution.txt", b"22")))
    unused = prepare_judge(engine, tag, task, make_archive(reg("solution.txt", b"33")))
    assert len(client.api.containers(all=True, filters=MINE)) == 3
    with first, second, unused:
        assert second.run().score == 22.0
        assert first.run().score == 11.0
    refused = prepare_judge(engine, tag, task, make_archive(reg("/abs")), limits=ArchiveLimits(
        max_members=0))
    assert refused.verdict is not None and not refused.run().valid


@docker_test
def test_key_and_submission_given_by_caller(client, judges, make_archive) -> None:
    r = grade(client, judges, "inspect", make_archive(reg("solution.txt", b"1")),
              key="k123", submission="s456")
    assert (r.key, r.submission, r.score) == ("k123", "s456", 1.0)


@docker_test
def test_dot_slash_prefixes(client, judges, make_archive) -> None:
    archive = make_archive(d("."), reg("./solution.txt", b"5"), d("./src/"),
                           reg("./src/main.c"), reg(".//src/./util.c"))
    r = grade(client, judges, "inspect", archive)
    assert r.valid and r.score == 5.0
    assert r.details == ["solution.txt", "src", "src/main.c", "src/util.c", "tests",
                         "tests/check.txt"]
    assert r.rejected == []


@docker_test
def test_paths_and_exclude(client, judges, make_archive) -> None:
    archive = make_archive(reg("solution.txt", b"7"), d("src"), reg("src/main.c"),
                           reg("src/main.o"), d("build"), reg("build/out"), reg("notes.md"))
    r = grade(client, judges, "inspect", archive)
    assert r.details == ["solution.txt", "src", "src/main.c", "tests", "tests/check.txt"]
    assert {x.path: x.reason for x in r.rejected} == {
        "src/main.o": "excluded by '*.o'",
        "build": "not in [submission] paths",
        "notes.md": "not in [submission] paths",
    }


@docker_test
def test_protected_judge_files_not_overwritten(client, judges, make_archive) -> None:
    archive = make_archive(reg("tests/check.txt", b"hacked"), reg("./tests/check.txt", b"hacked"),
                           sym("src", "tests"), reg("src/check.txt", b"hacked"),
                           reg("src/../tests/check.txt", b"hacked"), reg("solution.txt", b"1"))
    r = grade(client, judges, "inspect", archive)
    assert r.valid and r.summary == "original"
    assert "src" not in r.details
    rejected = {x.path for x in r.rejected}
    assert {"tests/check.txt", "src", "src/check.txt", "src/../tests/check.txt"} <= rejected


@docker_test
def test_missing_cwd_is_created(client, judges, make_archive) -> None:
    """The echo judge's cwd does not exist in its image."""
    r = grade(client, judges, "echo", make_archive(reg("result.json", b'{"valid": true, '
                                                                      b'"score": 1}')))
    assert (r.valid, r.score) == (True, 1.0)


# -- hostile archives ----------------------------------------------------------------------------
@docker_test
def test_hostile_corpus(client, judges, make_archive) -> None:
    task, tag = judges["inspect"]
    task = with_rules(task, paths=(".",), exclude=())
    archive = make_archive(
        reg("/pwned_abs"), reg("../pwned_dotdot"), reg("../../../pwned_dd3"),
        sym("esc", "/"), reg("esc/pwned_sym"), sym("rel", "../.."), reg("rel/pwned_rel"),
        d("x"), sym("x/up", ".."), sym("chain", "x/up/../pwned_chain"),
        hard("hl", "/etc/passwd"), hard("hl2", "../../../etc/hostname"),
        special("fifo", tarfile.FIFOTYPE), special("null", tarfile.CHRTYPE),
        special("sda", tarfile.BLKTYPE), reg("ok.txt"))
    r = run_judge(DockerEngine(client), tag, task, archive)
    assert r.valid
    assert r.metrics["escaped"] == []
    assert "ok.txt" in r.details
    for name in ("esc", "rel", "chain", "hl", "hl2", "fifo", "null", "sda"):
        assert name not in r.details, name
    rejected = {x.path: x.reason for x in r.rejected}
    assert set(rejected) == {"/pwned_abs", "../pwned_dotdot", "../../../pwned_dd3", "esc",
                             "esc/pwned_sym", "rel", "rel/pwned_rel", "chain", "hl", "hl2",
                             "fifo", "null", "sda"}
    assert rejected["fifo"] == "FIFO" and rejected["null"] == "device file"


@docker_test
def test_member_cap(client, judges, make_archive, tmp_path: Path) -> None:
    archive = make_archive(*[reg(f"solution{i}.txt") for i in range(30)])
    log_path = tmp_path / "refused.log"
    r = grade(client, judges, "inspect", archive, limits=ArchiveLimits(max_members=20),
              log_path=log_path)
    assert (r.valid, r.reason, r.exit_code) == (False, "archive exceeds 20 members", None)
    assert r.summary == r.reason
    assert "archive refused" in log_path.read_text()


@docker_test
def test_size_cap_is_a_gzip_bomb_guard(client, judges, tmp_path: Path) -> None:
    info = tarfile.TarInfo("solution.txt")
    info.size = 10 << 30  # the header claims 10 GiB; the data is never read
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(gzip.compress(info.tobuf(tarfile.GNU_FORMAT) + bytes(4096)))
    r = grade(client, judges, "inspect", archive, limits=ArchiveLimits(max_bytes=1 << 20))
    assert (r.valid, r.reason) == (False, f"archive exceeds {1 << 20} bytes uncompressed")


@docker_test
@pytest.mark.parametrize("kind", ["garbage", "empty", "truncated", "random gzip"])
def test_unreadable_archive_is_an_invalid_result(client, judges, tmp_path: Path,
                                                 kind: str) -> None:
    """Not a tar archive: that submission's invalid verdict with the reason, no container."""
    archive = tmp_path / "bad.tar.gz"
    info, data = reg("solution.txt", os.urandom(100_000))
    full = gzip.compress(info.tobuf() + data + bytes(-len(data) % 512) + bytes(1024))
    archive.write_bytes({"garbage": b"\x00garbage" * 1000, "empty": b"",
                         "truncated": full[: len(full) // 2],
                         "random gzip": b"\x1f\x8b" + os.urandom(4000)}[kind])
    log_path = tmp_path / "bad.log"
    r = grade(client, judges, "inspect", archive, log_path=log_path)
    assert r.valid is False and r.score is None
    assert "archive" in r.reason and ("not a readable tar" in r.reason or "corrupt" in r.reason)
    assert str(tmp_path) not in r.reason  # the reason names the submission, not a host path
    assert "archive refused" in log_path.read_text()


@docker_test
def test_names_the_daemon_cannot_create_never_reach_it(client, judges, make_archive) -> None:
    """A 300-byte name and a 4,200-character path used to be a Docker daemon error ("file
    name too long", an infrastructure failure that blocked every later grade)."""
    deep = "src/" + "/".join(["p" * 200] * 21)
    r = grade(client, judges, "inspect", make_archive(reg("solution.txt", b"5"),
                                                      reg("src/" + "n" * 300), reg(deep)))
    assert (r.valid, r.score) == (True, 5.0)
    why = {x.path[:8]: x.reason for x in r.rejected}
    assert why["src/nnnn"].startswith("name component of 300 bytes")
    assert why["src/pppp"].startswith("path of ")


@docker_test
def test_judge_container_is_locked_down(client, judges, make_archive) -> None:
    """no-new-privileges, a pids limit, only JUDGE_CAPS (from Docker's 14 defaults)."""
    r = grade(client, judges, "inspect", make_archive(),
              container_limits=judge_container.ContainerLimits(pids=321))
    m = r.metrics
    assert m["nnp"] == "1" and m["pids"] == "321"
    caps = int(m["capeff"], 16)
    numbers = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7}
    assert caps == sum(1 << numbers[c] for c in judge_container.JUDGE_CAPS)


@docker_test
def test_log_keeps_head_and_tail(client, judges, make_archive, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000,000 lines (~21 MB, ~200 MB of the daemon's JSON log): the first and last lines
    are kept with a line saying how much was cut between (the daemon's rotation used to drop
    the head silently)."""
    monkeypatch.setattr(judge_log, "LOG_HEAD_BYTES", 1 << 20, raising=False)
    monkeypatch.setattr(judge_log, "LOG_TAIL_BYTES", 1 << 20, raising=False)
    log_path = tmp_path / "noisy.log"
    r = grade(client, judges, "noisy", make_archive(reg("lines", b"3000000")), log_path=log_path)
    assert r.valid and r.score == 1.0
    text = log_path.read_bytes()
    assert text.startswith(b"1\n2\n3\n")
    total = sum(len(f"{i}\n") for i in range(1, 3_000_001))
    cut = total - (2 << 20)
    assert f"\n[sforge] … {cut} bytes cut …\n".encode() in text
    assert b"\n2999999\n3000000\n\n[sforge] judge exited with code 0" in text
    assert len(text) < (2 << 20) + 1000


@docker_test
def test_extraction_conflict_with_the_image_is_a_verdict(client, judges, make_archive) -> None:
    """A directory where the image has a file makes Docker fail the extraction: invalid."""
    task, tag = judges["inspect"]
    task = with_rules(task, paths=(".",), exclude=())
    r = run_judge(DockerEngine(client), tag, task, make_archive(reg("tests/check.txt/x")))
    assert not r.valid and "could not extract the submission" in r.reason
    assert "not a directory" in r.reason


@docker_test
def test_nul_bytes_in_names_and_link_targets_reach_nothing(client, judges, tmp_path) -> None:
    """A tar reader cuts a PAX name or link target at NUL: `tests\\0` would land over the
    excluded protected `tests/`, `solution.txt -> tests/check.txt\\0/../../src` as a link to
    the protected file. Both are rejected; the judge sees its own tests/check.txt."""
    task, tag = judges["inspect"]
    task = with_rules(task, paths=(".",), exclude=("tests",))
    link, over = sym("solution.txt", ""), sym("", "src")
    link[0].linkname = link[0].pax_headers["linkpath"] = "tests/check.txt\0/../../src"
    over[0].name = over[0].pax_headers["path"] = "tests\0"
    path = tmp_path / "nul.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in (d("src"), reg("src/check.txt", b"hacked"), link, over):
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    r = run_judge(DockerEngine(client), tag, task, path)
    assert r.valid and r.summary == "original", (r.summary, r.details)
    assert "solution.txt" not in r.details
    assert {x.path: x.reason for x in r.rejected} == {
        "solution.txt": "NUL byte in link target 'tests/check.txt\\x00/../../src'",
        "tests\\x00": "NUL byte in name"}


@docker_test
@pytest.mark.parametrize("member", ["link", "file"])
def test_a_member_never_replaces_an_image_folder(client, judges, tmp_path, member) -> None:
    """With the grader's tests/check.txt excluded, a member `tests` (a link to the archive's
    own folder, or a plain file) would replace the image's tests/ and the judge would read
    the archive's check.txt. Docker is told never to put a non-folder over a folder: the
    extraction fails and the verdict is INVALID."""
    task, tag = judges["inspect"]
    task = with_rules(task, paths=(".",), exclude=("tests/check.txt",))
    entries = [d("mine"), reg("mine/check.txt", b"hacked")]
    entries.append(sym("tests", "mine") if member == "link" else reg("tests", b"x"))
    path = tmp_path / "over.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    r = run_judge(DockerEngine(client), tag, task, path)
    assert r.summary != "hacked", (r.summary, r.details)
    assert not r.valid and "could not extract the submission" in r.reason, r.reason


FORGE_ROUTES = {
    # the image's own planted file, plus every route the archive filter already drops
    "baked into the image, or rejected by the filter": [
        reg("/opt/sforge/result.json", FORGED), reg("../../opt/sforge/result.json", FORGED),
        reg("../opt/sforge/result.json", FORGED), sym("s", "sforge"),
        reg("s/result.json", FORGED), sym("sforge", "/tmp"), reg("sforge/result.json", FORGED)],
    # these reach the container: the setup step must clear them
    "inside cwd (/opt)": [reg("sforge/result.json", FORGED)],
    "symlinked result.json": [reg("forged.json", FORGED),
                              sym("sforge/result.json", "../forged.json")],
    "hardlinked result.json": [reg("forged.json", FORGED),
                               hard("sforge/result.json", "forged.json")],
    "result.json as a directory": [d("sforge/result.json"), reg("sforge/result.json/x")],
    "/opt/sforge as a file": [reg("sforge", FORGED)],
}


@docker_test
@pytest.mark.parametrize("route", list(FORGE_ROUTES))
def test_forged_result_never_counts(client, judges, make_archive, route: str) -> None:
    r = grade(client, judges, "noresult", make_archive(*FORGE_ROUTES[route]))
    assert not r.valid and r.score is None
    if route.startswith("baked"):  # every file of it was dropped ("s -> sforge" is harmless)
        files = {info.name for info, data in FORGE_ROUTES[route] if data is not None}
        assert files <= {x.path for x in r.rejected}
    if route in ("result.json as a directory", "/opt/sforge as a file"):  # over a folder or
        # a file of the image: Docker refuses the extraction
        assert r.reason.startswith("could not extract the submission into /opt: ") and \
            "cannot overwrite" in r.reason, r.reason
    else:
        assert r.reason == "no /opt/sforge/result.json (judge exited with code 0)"


# -- result.json ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "reason"), [
    (b'{"valid": true, "score": "abc"}', "score must be a number, got 'abc'"),
    (b'{"valid": true, "score": true}', "score must be a number, got True"),
    (b'{"valid": true, "score": null}', "score must be a number, got None"),
    (b'{"valid": true, "score": NaN}', "score must be finite"),
    (b'{"valid": true, "score": -Infinity}', "score must be finite"),
    (b'{"valid": true, "score": 1e999}', "score must be finite"),
    (b'{"valid": true, "score": 1' + b"0" * 400 + b"}", "score must be finite"),
    (b'{"valid": true}', "valid is true but there is no 'score'"),
    (b'{"score": 1}', "result.json has no 'valid' field"),
    (b'{"valid": "yes", "score": 1}', "'valid' must be true or false, got 'yes'"),
    (b'{"valid": 1, "score": 1}', "'valid' must be true or false, got 1"),
    (b"[1, 2]", "result.json is not a JSON object (got list)"),
    (b"not json", "result.json is not valid JSON"),
    (b"\xff\xfe", "result.json is not valid JSON"),
    (b"[" * 100_000, "result.json is not valid JSON"),
    (b"", "result.json is not valid JSON"),
])
def test_parse_result_problems(content: bytes, reason: str) -> None:
    problem, fields = parse_result(content)
    assert problem is not None and reason in problem
    assert fields.get("score") is None


def test_parse_result_keeps_grader_fields() -> None:
    problem, fields = parse_result(b'{"valid": false, "score": 2, "summary": 7}')
    assert problem is None
    assert fields == {"valid": False, "score": 2.0, "summary": "7", "details": [], "metrics": {}}
    problem, fields = parse_result(b'{"valid": true, "score": 1, "details": {"x": 1}}')
    assert (problem, fields["details"], fields["score"]) == (None, {"x": 1}, 1.0)


@docker_test
@pytest.mark.parametrize(("content", "reason"), [
    (b'{"valid": true, "score": "abc"}', "score must be a number, got 'abc'"),
    (b'{"valid": true, "score": NaN}', "score must be finite"),
    (b"not json", "result.json is not valid JSON"),
])
def test_bad_result_is_invalid(client, judges, make_archive, content: bytes, reason: str) -> None:
    r = grade(client, judges, "echo", make_archive(reg("result.json", content)))
    assert not r.valid and r.score is None
    assert reason in r.reason and r.summary == r.reason


@docker_test
def test_grader_fields_are_kept(client, judges, make_archive) -> None:
    result = {"valid": True, "score": 3, "summary": "3/4 cases ok",
              "details": [{"name": "case_0000", "status": "PASSED", "score": 1.0}],
              "metrics": {"t": 1.5, "nested": {"a": [1]}}}
    r = grade(client, judges, "echo", make_archive(reg("result.json", json.dumps(result).encode())))
    assert (r.valid, r.score, r.summary, r.reason) == (True, 3.0, "3/4 cases ok", None)
    assert r.details == result["details"] and r.metrics == result["metrics"]


@docker_test
def test_grader_invalid_verdict_is_kept(client, judges, make_archive) -> None:
    content = b'{"valid": false, "summary": "wrong answer on case 3", "details": ["x"]}'
    r = grade(client, judges, "echo", make_archive(reg("result.json", content)))
    assert (r.valid, r.summary, r.reason, r.details) == (False, "wrong answer on case 3", None,
                                                         ["x"])


@docker_test
def test_missing_result(client, judges, make_archive, tmp_path: Path) -> None:
    log_path = tmp_path / "echo.log"
    r = grade(client, judges, "echo", make_archive(reg("other.txt")), log_path=log_path)
    assert not r.valid
    assert r.reason == "no /opt/sforge/result.json (judge exited with code 0)"
    text = log_path.read_text()
    assert "echo judge in /work/sub" in text and "to stderr" in text


# -- limits --------------------------------------------------------------------------------------
@docker_test
def test_timeout_kills_at_once(client, judges, make_archive, tmp_path: Path) -> None:
    log_path = tmp_path / "sleep.log"
    t0 = time.monotonic()
    r = grade(client, judges, "sleep", make_archive(), timeout=1.5, log_path=log_path)
    elapsed = time.monotonic() - t0
    assert (r.valid, r.timed_out, r.reason) == (False, True, "timed out after 1.5 s")
    assert r.summary == r.reason
    assert r.duration_s < 1.5 + 2
    assert elapsed < 1.5 + 5
    assert client.api.containers(all=True, filters={"label": "sforge.task=sleep", **MINE}) == []
    text = log_path.read_text()
    assert "sleeping" in text and "never" not in text and "timed out" in text


@docker_test
def test_task_timeout_used_by_default(client, judges, make_archive) -> None:
    task, tag = judges["sleep"]
    r = run_judge(DockerEngine(client), tag, with_judge(task, timeout_sec=1), make_archive())
    assert r.timed_out and r.reason == "timed out after 1 s"


@docker_test
def test_internet_when_asked(client, judges, make_archive) -> None:
    task, tag = judges["inspect"]
    r = run_judge(DockerEngine(client), tag, with_judge(task, internet=True), make_archive())
    assert "eth0" in r.metrics["net"]


@docker_test
def test_empty_archive_limits_env_and_no_network(client, judges, make_archive) -> None:
    """One run checks what an empty submission's judge sees: graded, limited, offline."""
    r = grade(client, judges, "inspect", make_archive())
    assert (r.valid, r.score, r.summary) == (True, 0.0, "original")
    assert r.details == ["tests", "tests/check.txt"]
    m = r.metrics
    assert m["net"] == ["lo"]
    assert (m["cpus"], m["memory"]) == ("0.5", "300m")
    assert int(m["quota"]) / int(m["period"]) == 0.5
    assert int(m["mem_limit"]) == parse_memory("300m")


@docker_test
def test_oom_kill(client, judges, make_archive) -> None:
    r = grade(client, judges, "oom", make_archive())
    assert (r.valid, r.oom_killed) == (False, True)
    assert r.reason == "killed: out of memory (limit 20m)"


# -- infrastructure ------------------------------------------------------------------------------
@docker_test
def test_daemon_unreachable(judges, make_archive) -> None:
    dead = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41")
    task, tag = judges["inspect"]
    with pytest.raises(InfrastructureError, match="nonexistent.sock"):
        run_judge(DockerEngine(dead), tag, task, make_archive(reg("solution.txt")))


@docker_test
def test_image_missing(client, judges, make_archive) -> None:
    task, _ = judges["inspect"]
    with pytest.raises(InfrastructureError, match="sforge-test-judge-absent:nope.*not found"):
        run_judge(DockerEngine(client), "sforge-test-judge-absent:nope", task, make_archive())


@docker_test
def test_ctrl_c_removes_the_container(client, judges, make_archive) -> None:
    task, tag = judges["sleep"]
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main
    timer = threading.Timer(1.0, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_judge(DockerEngine(client), tag, task, make_archive(), timeout=20)
    finally:
        timer.cancel()
    assert client.api.containers(all=True, filters=MINE) == []


@docker_test
def test_sweep_removes_only_dead_owners(client, judges) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = owner.labels(deadline=time.time() + 3600)
    api = client.api
    ids = {
        "dead": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.OWNER_PID_LABEL: str(dead.pid)})["Id"],
        "reused pid": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.OWNER_START_LABEL: "1"})["Id"],
        "live": api.create_container("busybox:1.36", "true", labels=labels)["Id"],
        "other host": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.OWNER_PID_LABEL: str(dead.pid),
            owner.OWNER_HOST_LABEL: "some-other-host"})["Id"],
        "live, deadline passed": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.DEADLINE_LABEL: str(int(time.time()) - 1)})["Id"],
        "other host, deadline passed": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.OWNER_HOST_LABEL: "some-other-host",
            owner.DEADLINE_LABEL: str(int(time.time()) - 1)})["Id"],
    }
    try:
        # Every sforge command sweeps at its start, so others' commands may remove the stale
        # ones first, even while we list: the low-level list, no per-container lookups.
        removed = set(sweep_stale_containers(DockerEngine(client)))
        assert ids["live"] not in removed and ids["other host"] not in removed
        left = {c["Id"] for c in api.containers(all=True, filters=MINE)}
        assert left == {ids["live"]}  # every stale one is gone, by this sweep or another
    finally:
        for cid in ids.values():
            with contextlib.suppress(docker.errors.APIError):  # gone, or being removed
                api.remove_container(cid, force=True)
        deadline = time.monotonic() + 30
        while api.containers(all=True, filters=MINE) and time.monotonic() < deadline:
            time.sleep(0.1)  # a removal "already in progress" elsewhere finishes


@docker_test
def test_remove_own_leaves_others_with_our_pid_number(client) -> None:
    """Ctrl-C removes this process's judges only: a container with our pid number from
    another host or another process (a daemon shared across pid namespaces) stays."""
    labels = owner.labels(deadline=time.time() + 3600)
    api = client.api
    ids = {
        "ours": api.create_container("busybox:1.36", "true", labels=labels)["Id"],
        "other host": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.OWNER_HOST_LABEL: "some-other-host"})["Id"],
        "other process": api.create_container("busybox:1.36", "true", labels={
            **labels, owner.OWNER_START_LABEL: "1"})["Id"],
    }
    try:
        assert owner.remove_own(DockerEngine(client)) == [ids["ours"]]
        left = {c["Id"] for c in api.containers(all=True, filters=MINE)}
        assert left == {ids["other host"], ids["other process"]}
    finally:
        for cid in ids.values():
            with contextlib.suppress(docker.errors.APIError):
                api.remove_container(cid, force=True)


# -- submission metadata -------------------------------------------------------------------------
def _acl(*entries: tuple[int, int, int]) -> bytes:
    import struct

    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


_NOONE = 0xFFFFFFFF
_DEFAULT_ACL = _acl((1, 7, _NOONE), (4, 7, _NOONE), (8, 5, 1234), (0x10, 7, _NOONE),
                    (0x20, 0, _NOONE))


_TOOL_ACL = _acl((1, 7, _NOONE), (4, 5, _NOONE), (8, 5, 1234), (0x10, 5, _NOONE),
                 (0x20, 5, _NOONE))


def _metadata_archive(tmp_path: Path) -> Path:
    """A shared directory with group 1234, mode 2770 and a default ACL; a setuid tool owned by
    1000; a user xattr; a file capability (never kept)."""
    def pax(value: bytes) -> str:
        return value.decode("utf-8", "surrogateescape")

    shared = tarfile.TarInfo("shared")
    shared.type, shared.mode, shared.gid = tarfile.DIRTYPE, 0o2770, 1234
    shared.pax_headers = {"SCHILY.xattr.system.posix_acl_default": pax(_DEFAULT_ACL),
                          "SCHILY.xattr.user.purpose": "research"}
    tool = tarfile.TarInfo("shared/tool")
    tool.size, tool.mode, tool.uid, tool.gid = 2, 0o4755, 1000, 1234
    # what a file made under that directory carries (GNU tar --xattrs records it so)
    tool.pax_headers = {"SCHILY.xattr.system.posix_acl_access": pax(_TOOL_ACL)}
    cap = tarfile.TarInfo("cap")
    cap.size, cap.mode = 2, 0o755
    cap.pax_headers = {"SCHILY.xattr.security.capability": pax(b"\x01\x00\x00\x02" + 16 * b"\0")}
    link = tarfile.TarInfo("link")
    link.type, link.linkname, link.uid = tarfile.SYMTYPE, "shared/tool", 1000
    path = tmp_path / "meta.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tar:
        tar.addfile(shared)
        tar.addfile(tool, io.BytesIO(b"#!"))
        tar.addfile(cap, io.BytesIO(b"#!"))
        tar.addfile(link)
    return path


def _extract_with_gnu_tar(client, tag: str, task: Task, archive: Path) -> dict:
    """The other way to extract: the filtered tar handed over as one file and unpacked inside
    the container by GNU tar (as a bind-mounted or in-container extraction would)."""
    from sforge.grading.archive import filter_submission

    with filter_submission(archive, task.submission, cwd=task.environment.cwd) as filtered:
        data = filtered.read_bytes()
    wrapper = io.BytesIO()
    with tarfile.open(fileobj=wrapper, mode="w") as tar:
        info = tarfile.TarInfo("sub.tar")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    script = (f"mkdir -p /opt/sforge && tar --xattrs --xattrs-include='*' --acls --same-owner "
              f"--numeric-owner -xpf /tmp/sub.tar -C {task.environment.cwd} && {task.judge.cmd}")
    ctr = client.api.create_container(tag, ["/bin/sh", "-c", script],
                                      working_dir=task.environment.cwd,
                                      host_config=client.api.create_host_config(
                                          network_mode="none"))
    try:
        client.api.put_archive(ctr["Id"], "/tmp", wrapper.getvalue())
        client.api.start(ctr["Id"])
        assert client.api.wait(ctr["Id"], timeout=60)["StatusCode"] == 0, client.api.logs(ctr)
        stream, _ = client.api.get_archive(ctr["Id"], "/opt/sforge/result.json")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return json.loads(tar.extractfile(tar.next()).read())
    finally:
        client.api.remove_container(ctr["Id"], force=True)


@docker_test
def test_submission_metadata_reaches_the_judge(client, judges, tmp_path: Path) -> None:
    """Modes (setgid, setuid), numeric owners, default ACLs and user xattrs arrive as submitted,
    whichever way the archive is extracted; the dropped capability is listed, not silent."""
    archive = _metadata_archive(tmp_path)
    task, tag = judges["metadata"]
    r = run_judge(DockerEngine(client), tag, task, archive)
    assert r.valid, r.reason
    seen = {d["name"]: d for d in r.details}
    assert seen["shared"]["mode"] == oct(0o42770) and seen["shared"]["gid"] == 1234
    assert seen["shared"]["xattrs"]["system.posix_acl_default"] == _DEFAULT_ACL.hex()
    assert seen["shared"]["xattrs"]["user.purpose"] == b"research".hex()
    assert seen["shared/tool"]["mode"] == oct(0o104755)
    assert (seen["shared/tool"]["uid"], seen["shared/tool"]["gid"]) == (1000, 1234)
    assert seen["shared/tool"]["xattrs"]["system.posix_acl_access"] == _TOOL_ACL.hex()
    assert seen["link"]["uid"] == 1000
    assert "security.capability" not in seen["cap"]["xattrs"]
    assert [(c.path, c.change.split(" (")[0]) for c in r.changed] == [
        ("cap", "xattr security.capability dropped")]
    # The verdict does not depend on how the archive is extracted.
    other = _extract_with_gnu_tar(client, tag, task, archive)
    assert other["details"] == r.details and other["score"] == r.score


def _poison(tmp_path: Path, name: str, info: tarfile.TarInfo) -> Path:
    path = tmp_path / f"{name}.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tar:
        tar.addfile(info, io.BytesIO(b"42"))
    return path


def _solution(**pax: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo("solution.txt")
    info.size, info.pax_headers = 2, pax
    return info


@docker_test
@pytest.mark.parametrize(("name", "pax", "change"), [
    ("huge-owner", {"uid": "99999999999999999999999", "gid": "99999999999999999999999"},
     "owner 99999999999999999999999:99999999999999999999999 -> 0:0"),
    ("far-mtime", {"mtime": "1e30"}, f"mtime 1e+30 -> {8**11 - 1}"),
    ("big-xattr", {"SCHILY.xattr.user.big": "A" * 10_000}, "xattr user.big dropped"),
    ("long-xattr-name", {"SCHILY.xattr.user." + "n" * 300: "v"},
     f"xattr user.{'n' * 300} dropped"),
    ("bad-acl", {"SCHILY.xattr.system.posix_acl_access":  # a user_obj entry, nothing else
                 _acl((1, 7, _NOONE)).decode("utf-8", "surrogateescape")},
     "ACL system.posix_acl_access dropped"),
])
def test_headers_the_daemon_refuses_never_reach_it(client, judges, tmp_path: Path, name: str,
                                                    pax: dict, change: str) -> None:
    """Each of these made put_archive fail ("invalid tar header", "no space left on device",
    "numerical result out of range", "invalid argument"): an infrastructure error, so no
    result was written and every later grade failed again. Now the value is normalised or
    dropped, said under `changed`, and the submission graded."""
    r = grade(client, judges, "inspect", _poison(tmp_path, name, _solution(**pax)))
    assert (r.valid, r.score) == (True, 42.0), r.reason
    assert [c.change.split(" (")[0].split(": ")[0] for c in r.changed] == [change]


@docker_test
def test_negative_size_is_an_invalid_result(client, judges, tmp_path: Path) -> None:
    """A pax size of -1 was "cannot write the filtered copy" (exit 4): now a verdict."""
    log_path = tmp_path / "neg.log"
    r = grade(client, judges, "inspect", _poison(tmp_path, "neg", _solution(size="-1")),
              log_path=log_path)
    assert (r.valid, r.score, r.reason) == (
        False, None, "member 'solution.txt' has a negative size")
    assert "archive refused" in log_path.read_text()


@docker_test
def test_wrongly_rooted_archive_said_in_the_summary(client, judges, make_archive) -> None:
    archive = make_archive(d("app"), reg("app/solution.txt", b"9"))
    r = grade(client, judges, "inspect", archive)
    assert r.valid and r.score == 0
    assert "wrongly rooted" in r.summary and "'app/'" in r.summary
    assert r.warnings and r.summary.endswith("original")


# -- the two ways result.json comes out give the same verdict ------------------------------------
class _CountingEngine(DockerEngine):
    """The real engine, counting how often result.json is read through its archive API."""

    def __init__(self, client):  # type: ignore[no-untyped-def]
        super().__init__(client)
        self.archive_reads = 0

    def read_file(self, cid, path, cap):  # type: ignore[no-untyped-def]
        self.archive_reads += 1
        return super().read_file(cid, path, cap)


def _same_verdict_cases(tmp_path: Path) -> list[tuple[str, str, list[tuple], int]]:
    """(name, judge, archive entries, archive reads expected with the out directory)."""
    cases = [(f"forge: {route}", "noresult", entries, 0)
             for route, entries in FORGE_ROUTES.items()]
    cases += [(f"echo: {content[:20]!r}", "echo", [reg("result.json", content)], 0)
              for content in (b'{"valid": true, "score": "abc"}', b"not json", b"",
                              b'{"valid": false, "score": 3, "summary": "no"}',
                              b'{"valid": true, "score": 7.5, "details": [1], "metrics": {}}')]
    cases.append(("echo: no result", "echo", [reg("other.txt")], 0))
    shapes = ["file", "symlink", "dangling", "dir", "fifo", "big", "cap", "none", "exit3",
              "forge-out"]
    cases += [(f"shape: {s}", "shapes", [reg("shape.txt", s.encode())], 0) for s in shapes]
    cases += [(f"tampered: {s}", "shapes", [reg("shape.txt", s.encode())], 1)
              for s in ("kind-dir", "kind-link")]
    cases += [
        ("inspect: valid", "inspect", [reg("solution.txt", b"42"), d("src"), reg("src/main.c")],
         0),
        ("inspect: collision with the image", "inspect", [reg("tests/check.txt/x")], 0),
        ("inspect: wrongly rooted", "inspect", [d("app"), reg("app/solution.txt", b"9")], 0),
        ("inspect: hostile", "inspect", [
            reg("/pwned_abs"), reg("../pwned_dotdot"), sym("esc", "/"), reg("esc/pwned_sym"),
            hard("hl", "/etc/passwd"), special("fifo", tarfile.FIFOTYPE),
            reg("solution.txt", b"3")], 0),
        ("oom", "oom", [], 0),
    ]
    return cases


@docker_test
def test_result_read_both_ways_gives_the_same_verdict(client, judges, make_archive,
                                                     tmp_path: Path) -> None:
    """Every archive above, and the metadata archive, graded with result.json read from the
    private out directory and through the engine's archive API: the same EvalResult (timing
    aside). The out directory is really used, and a tampered one is never believed."""
    timing = {"started_at", "finished_at", "duration_s", "log"}
    engine = _CountingEngine(client)
    run_judge(engine, judges["echo"][1], judges["echo"][0], make_archive())  # learns its bound
    assert engine.shares_files and not engine.bounds_writable  # this machine's overlay2 on ext4
    cases = _same_verdict_cases(tmp_path)
    cases_paths = [(name, judge, make_archive(*entries), reads)
                   for name, judge, entries, reads in cases]
    cases_paths.append(("metadata", "metadata", _metadata_archive(tmp_path), 0))
    for name, judge, archive, reads in cases_paths:
        task, tag = judges[judge]
        if name in ("inspect: collision with the image", "inspect: hostile"):
            task = with_rules(task, paths=(".",), exclude=())
        before = engine.archive_reads
        fast = run_judge(engine, tag, task, archive, copy_out=True)
        assert engine.archive_reads - before == reads, name
        slow = run_judge(engine, tag, task, archive, copy_out=False)
        assert engine.archive_reads - before == reads + (fast.exit_code is not None
                                                          and not fast.timed_out), name
        a, b = fast.to_dict(), slow.to_dict()
        for key in timing:
            a.pop(key, None)
            b.pop(key, None)
        assert a == b, name


class _BoundingEngine(_CountingEngine):
    """An engine that says it bounds the writable layer (as on xfs with project quotas)."""

    @property
    def bounds_writable(self) -> bool:
        return True


@docker_test
def test_no_out_directory_where_the_writable_layer_is_bounded(client, judges,
                                                              make_archive) -> None:
    """A writable host directory beside a bounded layer would be a way around the bound: the
    result is read through the archive API there."""
    engine = _BoundingEngine(client)
    r = run_judge(engine, judges["echo"][1], judges["echo"][0],
                  make_archive(reg("result.json", b'{"valid": true, "score": 6}')))
    assert (r.valid, r.score) == (True, 6.0)
    assert engine.archive_reads == 1


def test_sweep_removes_only_dead_owners_out_directories(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(owner.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = owner.private_dir()
    (mine / "result.json").write_text("{}")
    here, there = owner.host_tag(), owner.host_tag(owner.hostname() + "-other-node")
    others = {
        "dead": tmp_path / f"{owner.OUT_DIR_PREFIX}h{here}-{dead.pid}-1-abc",
        "reused pid": tmp_path / f"{owner.OUT_DIR_PREFIX}h{here}-{os.getpid()}-1-abc",
        "not ours": tmp_path / "sforge-output-of-something",
        # a node sharing this temp dir (same path, own pid namespace): its pid means nothing
        # here, so its live judge's directory is never taken for a dead one's
        "another host's": tmp_path / f"{owner.OUT_DIR_PREFIX}h{there}-{dead.pid}-1-abc",
        "older name without a host": tmp_path / f"{owner.OUT_DIR_PREFIX}{dead.pid}-1-abc",
    }
    for path in others.values():
        (path / "sub").mkdir(parents=True)
    removed = owner.sweep_stale_dirs()
    assert sorted(removed) == sorted([str(others["dead"]), str(others["reused pid"])])
    assert mine.is_dir() and mine.name.startswith(f"{owner.OUT_DIR_PREFIX}h{here}-")
    assert all(others[k].is_dir() for k in ("not ours", "another host's",
                                             "older name without a host"))


@docker_test
def test_a_daemon_that_cannot_bind_the_out_directory_still_grades(client, judges, make_archive,
                                                                  monkeypatch) -> None:
    """A local socket whose daemon cannot see this machine's temp dir (forwarded from another
    host, a desktop VM): the judge is created without the out directory, the result read
    through the archive API."""
    monkeypatch.setattr(owner, "private_dir",
                        lambda: Path("/nonexistent-sforge-test/sforge-out-x"))
    engine = _CountingEngine(client)
    r = run_judge(engine, judges["echo"][1], judges["echo"][0],
                  make_archive(reg("result.json", b'{"valid": true, "score": 6}')))
    assert (r.valid, r.score) == (True, 6.0)
    assert engine.archive_reads == 1


@docker_test
def test_setup_without_system_rm_refuses_and_never_runs_a_planted_one(
        client, judges, make_archive, tmp_path: Path) -> None:
    """The setup step takes rm, mkdir and head from the system folders only: an image with
    no rm there gets an invalid verdict whose log names what is missing, and a submitted
    bin/rm (on the image's PATH) never runs in its place."""
    planted = b"#!/bin/sh\necho planted-rm-ran >&2\n"
    archive = make_archive(reg("bin/rm", planted, 0o755))
    result = grade(client, judges, "no_rm", archive, log_path=tmp_path / "no_rm.log")
    assert not result.valid and result.exit_code == 222, result
    assert "no rm, mkdir or head" in (result.reason or "")
    log = (tmp_path / "no_rm.log").read_text()
    assert "the judge image has no rm, mkdir or head in /usr/local/sbin:" in log, log
    assert "planted-rm-ran" not in log
