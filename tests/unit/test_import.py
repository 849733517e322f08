"""`sforge import`: Harbor and Terminal-Bench tasks (tests/fixtures/import/<format>/<task>/,
written for this suite) become sforge tasks; what does not fit is reported, never written
(the imported tasks graded on real images: tests/integration/test_import_grading.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sforge.benchmark.loader import load_benchmark
from sforge.importers import import_tasks
from tests.helpers import paths
from tests.helpers.imports import FITS

FIXTURES = paths.FIXTURES / "import"


def test_import_writes_what_fits_and_says_why_the_rest_does_not(tmp_path: Path) -> None:
    into = tmp_path / "bench"
    reports = {r.task_id: r for fmt in ("harbor", "terminal-bench")
               for r in import_tasks(fmt, [FIXTURES / fmt], into)}
    assert {t for t, r in reports.items() if r.fits} == set(FITS)
    assert set(reports) == set(FITS) | {"service-check", "with-database"}
    assert reports["service-check"].problems == [
        "tests read absolute paths outside the submission: /etc/nginx/nginx.conf",
        "tests check system state (checks services or processes: 'systemctl')",
        "tests need the network ('curl')"]
    assert reports["with-database"].problems == [
        "needs a compose file: 2 services (client, db); sforge runs one container",
        "tests time themselves ('time.time('): the verdict would depend on machine load"]
    # nothing of a task that does not fit is written
    assert sorted(p.name for p in (into / "tasks").iterdir()) == sorted(FITS)
    bench = load_benchmark(into)
    assert not bench.errors and set(bench.tasks) == set(FITS)

    hello = bench.tasks["hello-world"]
    assert hello.environment.cwd == "/app"  # from WORKDIR
    assert hello.submission.paths == ("hello.txt",)  # what the tests read
    assert (hello.judge.timeout_sec, hello.environment.cpus, hello.environment.memory) == \
        (60.0, 1.0, "512m")
    assert hello.metadata["category"] == "demo"
    imported = hello.metadata["imported"]
    assert imported["format"] == "harbor"
    assert imported["source"] == str(FIXTURES / "harbor" / "hello-world")
    assert imported["agent_timeout_sec"] == 300.0
    assert len(imported["commit"]) == 40  # this repository's commit: provenance
    judge = (hello.dir / "judge" / "Dockerfile").read_text()
    assert "ARG WORK_IMAGE\nFROM ${WORK_IMAGE}\n" in judge
    env = (hello.dir / "environment" / "Dockerfile").read_text()
    assert "COPY environment/README.md ./README.md" in env  # build context: the task dir

    acl = bench.tasks["shared-acl"]
    assert acl.submission.paths == ("shared",) and acl.judge.timeout_sec == 120.0
    judge = (acl.dir / "judge" / "Dockerfile").read_text()
    assert "RUN cd /app && apt-get update \\\n    && apt-get install -y python3-pytest" in judge
    script = (acl.dir / "judge" / "tests" / "run-tests.sh").read_text()
    assert "apt-get" not in script and "pytest-3 $TEST_DIR/test_outputs.py -rA" in script
    assert "apt-get update" in (acl.dir / "judge" / "original" / "run-tests.sh").read_text()
    notes = (acl.dir / "NOTES.md").read_text()
    for change in ("cwd = /app, from the Dockerfile's WORKDIR",
                   "test-time install moved into the judge build: 'apt-get install -y "
                   "python3-pytest'", "[submission] paths = ['shared']",
                   "[judge] timeout_sec = 120"):
        assert change in notes
    # importing again does not overwrite silently
    again = import_tasks("terminal-bench", [FIXTURES / "terminal-bench" / "hello-file"], into)
    assert not again[0].fits and "exists (use --force" in again[0].problems[0]


def _tb_task(root: Path, test: str, run_tests: str = "pytest $TEST_DIR/test_outputs.py -rA\n",
             dockerfile: str = "FROM python:3.11-slim-bookworm\nWORKDIR /app\n") -> Path:
    task = root / f"t{uuid.uuid4().hex[:6]}"
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_text("instruction: do it\n")
    (task / "Dockerfile").write_text(dockerfile)
    (task / "run-tests.sh").write_text(run_tests)
    (task / "tests" / "test_outputs.py").write_text(test)
    return task


@pytest.mark.parametrize(("test", "run_tests", "reason"), [
    ('open("/etc/app.conf")', None, "absolute paths outside the submission: /etc/app.conf"),
    ('subprocess.run(["dpkg", "-l", "nginx"])', None, "checks installed packages"),
    ('grp.getgrnam("staff")', None, "user or group 'staff'"),
    ('requests.get("https://example.com")', None, "need the network"),
    ("start = time.perf_counter()", None, "time themselves"),
    ("", "if true; then\n  pip install pytest\nfi\npytest -rA\n",
     "test-time install cannot move into the judge build"),
    ("", "pip install -r requirements.txt\npytest -rA\n",
     "test-time install cannot move into the judge build"),
])
def test_what_does_not_fit(tmp_path: Path, test: str, run_tests: str | None,
                           reason: str) -> None:
    src = _tb_task(tmp_path / "src", test, *(r for r in [run_tests] if r))
    [report] = import_tasks("terminal-bench", [src], tmp_path / "bench")
    assert not report.fits and any(reason in p for p in report.problems), report.problems
    assert not (tmp_path / "bench" / "tasks" / src.name).exists()


def test_groups_the_environment_creates_are_files_not_system_state(tmp_path: Path) -> None:
    src = _tb_task(tmp_path / "src", 'grp.getgrnam("research")\nopen("/app/out.txt")',
                   dockerfile="FROM python:3.11-slim-bookworm\nRUN groupadd -g 7 research\n"
                   "WORKDIR /app\n")
    [report] = import_tasks("terminal-bench", [src], tmp_path / "bench")
    assert report.fits, report.problems


def test_copy_sources_follow_the_build_context() -> None:
    from sforge.importers.draft import rewrite_copy_sources

    text = ("FROM x:1\nCOPY . /app\nCOPY ./.bashrc ./src/ /root/\nADD --chown=1:1 a.tgz /o\n"
            'COPY ["my file", "/dst/"]\nCOPY --from=build /out /out\nADD https://x.org/f /f\n')
    out, count = rewrite_copy_sources(text, "environment")
    assert out.splitlines()[1:] == [
        "COPY environment /app", "COPY environment/.bashrc environment/src /root/",
        "ADD --chown=1:1 environment/a.tgz /o", 'COPY ["environment/my file", "/dst/"]',
        "COPY --from=build /out /out", "ADD https://x.org/f /f"]
    assert count == 5


def test_base_is_shared_by_tasks_from_the_same_image(tmp_path: Path) -> None:
    into = tmp_path / "bench"
    for fmt, task in (("harbor", "hello-world"), ("terminal-bench", "hello-file"),
                      ("terminal-bench", "shared-acl")):
        [report] = import_tasks(fmt, [FIXTURES / fmt / task], into, base="py")
        assert report.fits, report.problems
    assert (into / "bases" / "py" / "Dockerfile").read_text() == \
        "FROM python:3.11-slim-bookworm\n"
    bench = load_benchmark(into)
    assert not bench.errors
    assert {t.id: t.environment.base for t in bench.tasks.values()} == {
        "hello-world": "py", "hello-file": "py", "shared-acl": "py"}
    env = (into / "tasks" / "shared-acl" / "environment" / "Dockerfile").read_text()
    assert env.startswith("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN apt-get update")


@pytest.mark.parametrize(("fmt", "task", "file"), [
    ("harbor", "hello-world", "task.toml"), ("harbor", "hello-world", "instruction.md"),
    ("terminal-bench", "hello-file", "task.yaml")])
def test_a_source_file_that_is_not_utf8_is_named(tmp_path: Path, fmt: str, task: str,
                                                  file: str) -> None:
    """A task file that is not UTF-8 text stops that task with one line naming the file and
    the byte, never a UnicodeDecodeError."""
    import shutil

    from sforge.core.errors import SforgeError
    from sforge.importers import harbor, terminal_bench

    src = tmp_path / task
    shutil.copytree(FIXTURES / fmt / task, src)
    (src / file).write_bytes((src / file).read_bytes() + b"\n# caf\xe9\n")
    reader = harbor.read if fmt == "harbor" else terminal_bench.read
    with pytest.raises(SforgeError, match=rf"{file}: not UTF-8 text \(byte 0xe9"):
        reader(src)
