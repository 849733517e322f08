"""Run targets without `sforge run`: plain Snakemake makes one from config (starting its own
judge service), and `sforge runs --cancel` stops a running one. A busybox task whose judge
answers at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.model_server import INPUT_TOKENS, OUTPUT_TOKENS, ScriptedModel
from tests.helpers.paths import FIXTURES, REPO
from tests.helpers.runs import run_containers

pytestmark = pytest.mark.docker


@pytest.fixture
def servicebench(tmp_path, docker_client):
    """The CLI over a copy of fixtures/servicebench under a unique name; its images removed
    after."""
    name = copy_bench(FIXTURES / "servicebench", tmp_path / "bench")
    yield Sforge(tmp_path / "bench", tmp_path / "results", name)
    remove_images(docker_client, name)


def test_plain_snakemake_makes_a_run(servicebench, tmp_path):
    script = tmp_path / "a.sh"
    script.write_text("echo 6 > answer.txt; sforge-submit\n")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "benchmark": str(servicebench.bench), "results": str(servicebench.results),
        "run": {"id": "plain", "agent": "script", "script": str(script), "timeout_s": 60}}))
    target = (servicebench.results / servicebench.name / "runs" / "plain" / "quick" / "0" /
              "run.json")
    proc = subprocess.run([sys.executable, "-m", "snakemake", str(target), "--cores", "2",
                           "--configfile", str(config)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(target.read_text())
    assert rec["best_score"] == 6 and rec["rounds"] == 2 and rec["final"]["final"]
    # the run is in `sforge runs`, done
    listed = json.loads(servicebench.run("runs", "--json", check=True).stdout)["runs"]
    assert [(r["run"], r["state"]) for r in listed] == [("plain", "done")]


def start_slow_run(servicebench, tmp_path, run_id: str, answer: int, submit: bool = False,
                   extra: tuple[str, ...] = ()):
    """`sforge run` of a script that writes its answer (and with `submit` submits it and
    waits for its verdict), says so, then works for 100 s; returns once it has said so."""
    script = tmp_path / f"{run_id}.sh"
    script.write_text(f"echo {answer} > answer.txt; {'sforge-submit; ' if submit else ''}"
                      "echo WRITTEN; sleep 100\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sforge", "-b", str(servicebench.bench), "--results",
         str(servicebench.results), "run", "--agent", "script", "--script", str(script),
         "--task", "quick", "--run-id", run_id, "--timeout", "200", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    folder = servicebench.results / servicebench.name / "runs" / run_id / "quick" / "0"
    log = folder / "agent.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "WRITTEN" in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.2)
    return proc, folder


def test_cancel_a_running_run(servicebench, tmp_path):
    proc, folder = start_slow_run(servicebench, tmp_path, "c1", 3)
    listed = json.loads(servicebench.run("runs", "--run", "c1", "--json",
                                         check=True).stdout)["runs"]
    assert listed[0]["state"] == "running"
    started = time.monotonic()
    servicebench.run("runs", "--cancel", "c1", check=True)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, out
    assert time.monotonic() - started < 60  # not the script's 100 s
    rec = json.loads((folder / "run.json").read_text())
    assert rec["stopped_by"] == "cancelled" and not rec["interrupted"]
    assert rec["final"]["score"] == 3  # the workspace it left was graded


def test_cancel_covers_the_jobs_not_started_yet(servicebench, tmp_path):
    """--repeat 2 with one job at a time: a cancel while the first runs also stops the
    second, which records cancelled without starting its agent."""
    script = tmp_path / "c2.sh"
    script.write_text("echo 3 > answer.txt; echo WRITTEN; sleep 100\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sforge", "-b", str(servicebench.bench), "--results",
         str(servicebench.results), "run", "--agent", "script", "--script", str(script),
         "--task", "quick", "--run-id", "c2", "--timeout", "200", "--repeat", "2", "-j", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run = servicebench.results / servicebench.name / "runs" / "c2"
    deadline = time.monotonic() + 120
    while not any("WRITTEN" in log.read_text() for log in run.glob("quick/*/agent.log")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.2)
    asked = servicebench.run("runs", "--cancel", "c2", check=True)
    assert "cancel asked of 2 unfinished run(s)" in asked.stdout, asked.stdout
    started = time.monotonic()
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, out
    assert time.monotonic() - started < 60  # not the script's 100 s, twice
    records = [json.loads((run / "quick" / str(r) / "run.json").read_text()) for r in (0, 1)]
    assert [r["stopped_by"] for r in records] == ["cancelled", "cancelled"], records
    never = [r for r in records if r["rounds"] == 0]
    assert len(never) == 1 and never[0]["final"] is None and never[0]["exit_code"] is None
    assert not list(run.glob("quick/*/cancel"))


def test_a_retry_keeps_the_earlier_attempts_log(servicebench, tmp_path):
    """agent.log is the latest attempt's; an earlier attempt's log stays beside its record
    as agent-attempt-<n>.log, linked from the run page."""
    proc, folder = start_slow_run(servicebench, tmp_path, "i4", 5)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=60)
    (tmp_path / "i4.sh").write_text("echo 6 > answer.txt; echo SECOND-TRY\n")
    servicebench.run("run", "--agent", "script", "--script", str(tmp_path / "i4.sh"),
                     "--task", "quick", "--run-id", "i4", "--timeout", "200", check=True)
    assert json.loads((folder / "run.json").read_text())["attempt"] == 2
    first = (folder / "agent-attempt-1.log").read_text()
    assert "WRITTEN" in first and "SECOND-TRY" not in first
    latest = (folder / "agent.log").read_text()
    assert "SECOND-TRY" in latest and "WRITTEN" not in latest
    assert not (folder / "agent-attempt-2.log").exists()  # agent.log is the latest's
    servicebench.run("report", check=True)
    page = (servicebench.results / servicebench.name / "report" / "runs" / "i4"
            / "quick-0.html").read_text()
    assert 'quick/0/agent-attempt-1.log">agent-attempt-1.log</a>' in page
    assert "(1 earlier attempt(s) recorded)" in page


def test_second_ctrl_c_leaves_no_container(servicebench, tmp_path, docker_client):
    proc, folder = start_slow_run(servicebench, tmp_path, "i1", 4)
    os.killpg(proc.pid, signal.SIGINT)   # Ctrl-C: the terminal signals the whole group
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)   # and again
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode != 0, out
    assert "abandoning final grading" in out
    assert not (folder / "run.json").exists()
    attempt = json.loads((folder / "attempt-1.json").read_text())
    assert attempt["interrupted"]
    assert not run_containers(docker_client, servicebench, "i1")


def test_ctrl_c_says_the_run_was_interrupted(servicebench, tmp_path):
    """Ctrl-C: one line says the run was interrupted and what running it again does; no
    FAILED line, no Python frames or Snakemake internals; the exit code is Ctrl-C's."""
    proc, folder = start_slow_run(servicebench, tmp_path, "i3", 5)
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, out
    assert "quick  i3/0  interrupted: attempt 1 recorded" in out, out
    assert "`sforge run` again starts it afresh" in out, out
    for internal in ("FAILED", "RuleException", "File \"", "Traceback", "Exiting because",
                     "--keep-incomplete", "did not complete successfully"):
        assert internal not in out, out
    assert json.loads((folder / "attempt-1.json").read_text())["state"] == "interrupted"


def test_second_ctrl_c_keeps_the_graded_submissions(servicebench, tmp_path):
    """Ctrl-C twice, 0.5 s apart: the final grading is abandoned, but the record keeps the
    submission the agent made and had graded, and no final result it did not get."""
    proc, folder = start_slow_run(servicebench, tmp_path, "i2", 7, submit=True)
    assert "(round 1): VALID" in (folder / "agent.log").read_text()
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode()
    assert "abandoning final grading" in out, out
    attempt = json.loads((folder / "attempt-1.json").read_text())
    assert attempt["interrupted"] and attempt["state"] == "interrupted"
    first = attempt["submissions"][0]
    assert first["round"] == 1 and first["state"] == "done" and first["score"] == 7, attempt
    assert attempt["rounds"] >= 1 and attempt["best_score"] == 7 and attempt["best_round"] == 1
    # the final workspace's result is recorded only when it was graded
    assert attempt["final"] is None or attempt["final"]["state"] == "done", attempt["final"]


def _claude(servicebench, model, run_id, *extra):
    return servicebench.run("run", "--agent", "claude-code", "--task", "quick", "--run-id", run_id,
                        "--timeout", "120", "--model-api", model.url, *extra,
                        env={"ANTHROPIC_API_KEY": "sk-ant-test-plain"})


def test_claude_in_busybox_resumes_then_stops_at_a_token_cap(servicebench):
    """claude-code in a busybox-only work image (musl's loader and bash-static from the
    bundle): when it finishes early its resume command restarts it (bounded); a token cap
    stops a run."""
    model = ScriptedModel(commands=["echo 9 > answer.txt && sforge-submit"]).start()
    try:
        done = _claude(servicebench, model, "resumed", "--max-resumes", "2")
        calls = len(model.requests)
        capped = _claude(servicebench, model, "capped",
                         "--max-tokens", str(INPUT_TOKENS + OUTPUT_TOKENS + 1))
    finally:
        model.stop()
    root = servicebench.results / servicebench.name / "runs"
    assert done.returncode == 0, done.stdout + done.stderr
    rec = json.loads((root / "resumed" / "quick" / "0" / "run.json").read_text())
    assert rec["best_score"] == 9 and rec["resumes"] == 2 and rec["exit_code"] == 0
    assert (root / "resumed" / "quick" / "0" / "agent.log").read_text().count(
        "starting: resume") == 2
    assert rec["usage"]["calls"] == calls
    assert capped.returncode == 0, capped.stdout + capped.stderr
    rec = json.loads((root / "capped" / "quick" / "0" / "run.json").read_text())
    assert rec["stopped_by"] == "cap" and "max-tokens" in rec["usage"]["capped"]
    assert rec["usage"]["calls"] == 2 and rec["resumes"] == 0  # no restart past a cap
    # the report's runs pages, from the real claude CLI's transcript and the run's rounds
    servicebench.run("report", check=True)
    pages = root.parent / "report"
    assert 'href="runs/resumed/quick-0.html"' in (pages / "runs.html").read_text()
    page = (pages / "runs" / "resumed" / "quick-0.html").read_text()
    done_rec = json.loads((root / "resumed" / "quick" / "0" / "run.json").read_text())
    assert page.count('<details class="call"') == calls
    assert '<span class="kind">tool-call</span> Bash' in page
    assert "echo 9 &gt; answer.txt &amp;&amp; sforge-submit" in page  # escaped, as sent
    assert '<span class="kind">tool-result</span>' in page
    # each call shows what it added: the task's prompt once, not with every call
    assert page.count("# How this run works") <= 2 * (1 + done_rec["resumes"])
    key = done_rec["submissions"][0]["key"]
    assert f'href="../../../evals/quick/{key}.json"' in page
    assert (root.parent / "evals" / "quick" / f"{key}.json").is_file()


def test_timeout_grades_the_final_workspace(servicebench, tmp_path, docker_client):
    script = tmp_path / "long.sh"
    script.write_text("echo 2 > answer.txt; sleep 300\n")
    servicebench.run("run", "--agent", "script", "--script", str(script), "--task", "quick",
                 "--run-id", "t1", "--timeout", "4", check=True)
    rec = json.loads((servicebench.results / servicebench.name / "runs" / "t1" / "quick" / "0" /
                      "run.json").read_text())
    assert rec["timed_out"] and rec["stopped_by"] == "timeout" and rec["exit_code"] is None
    assert rec["final"]["final"] and rec["final"]["score"] == 2 and rec["best_score"] == 2
    assert rec["elapsed_s"] < 60
    assert not run_containers(docker_client, servicebench, "t1")


def test_an_agent_printing_without_end_cannot_fill_the_disk(servicebench, tmp_path):
    """agent.log is on the host: it keeps the head and the tail of what the agent prints,
    with a line saying how much was cut between, and the run goes on to its record."""
    from sforge.runs.agent_log import AGENT_LOG_HEAD, AGENT_LOG_TAIL

    script = tmp_path / "loud.sh"
    script.write_text("echo 5 > answer.txt; echo FIRST; head -c 120000000 /dev/zero | "
                      "tr '\\0' x; echo; echo LAST\n")
    servicebench.run("run", "--agent", "script", "--script", str(script), "--task", "quick",
                 "--run-id", "loud", "--timeout", "120", check=True)
    folder = servicebench.results / servicebench.name / "runs" / "loud" / "quick" / "0"
    log = (folder / "agent.log").read_bytes()
    assert len(log) < AGENT_LOG_HEAD + AGENT_LOG_TAIL + 4096
    assert b"FIRST" in log[:4096] and b"LAST" in log[-4096:]
    assert b"bytes cut" in log and b"agent exited 0" in log[-200:]
    assert json.loads((folder / "run.json").read_text())["final"]["score"] == 5


def test_a_run_with_the_daemon_down_is_failed_and_retried(servicebench, tmp_path):
    """The images built, the Docker daemon unreachable when the run job starts: exit 4
    (infrastructure), and `sforge runs` shows the run failed with why (not pending); the
    same command with the daemon up makes it, as a second attempt."""
    servicebench.run("build", "--task", "quick", check=True)
    script = tmp_path / "down.sh"
    script.write_text("echo 4 > answer.txt\n")
    args = ("run", "--agent", "script", "--script", str(script), "--task", "quick",
            "--run-id", "down", "--timeout", "60")
    proc = servicebench.run(*args, env={"DOCKER_HOST": f"unix://{tmp_path}/nonexistent.sock"})
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Docker daemon" in proc.stderr, proc.stderr
    folder = servicebench.results / servicebench.name / "runs" / "down" / "quick" / "0"
    assert not (folder / "run.json").exists()
    rows = json.loads(servicebench.run("runs", "--run", "down", "--json", check=True).stdout)
    [row] = rows["runs"]
    assert row["state"] == "failed" and "Docker daemon" in row["error"], row
    table = servicebench.run("runs", "--run", "down", check=True).stdout
    assert "failed" in table and "pending" not in table, table
    again = servicebench.run(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    [row] = json.loads(servicebench.run("runs", "--run", "down", "--json",
                                        check=True).stdout)["runs"]
    assert row["state"] == "done" and row["attempts"] == 2 and row["best"] == 4, row


def test_runs_shows_the_agents_exit_code(servicebench, tmp_path):
    """A script agent that ends `exit 7`: the run is done (its workspace graded), and
    `sforge runs` shows the exit code beside why it stopped, in the table and in --json."""
    script = tmp_path / "seven.sh"
    script.write_text("echo 4 > answer.txt\necho boom >&2\nexit 7\n")
    servicebench.run("run", "--agent", "script", "--script", str(script), "--task", "quick",
                     "--run-id", "x7", "--timeout", "60", check=True)
    [row] = json.loads(servicebench.run("runs", "--run", "x7", "--json",
                                        check=True).stdout)["runs"]
    assert (row["state"], row["stopped_by"], row["exit_code"]) == ("done", "agent", 7), row
    header, _, line = servicebench.run("runs", "--run", "x7", check=True).stdout.splitlines()
    names, cells = header.split(), line.split()
    assert names[names.index("stopped_by") + 1] == "exit_code", header
    assert cells[names.index("exit_code")] == "7", (header, line)


@pytest.mark.parametrize("run_id", ["..", "../..", "*", "r1/../..", ""])
def test_runs_takes_only_run_ids(tmp_path, run_id):
    """`sforge runs --cancel R` and `sforge runs --run R` refuse what is not a run id: a path or a
    pattern there wrote cancel files across results/ (or cancelled every run)."""
    bench = FIXTURES / "servicebench"
    results = tmp_path / "results"
    (results / "servicebench" / "evals" / "quick").mkdir(parents=True)
    (results / "servicebench" / "runs" / "r1" / "quick" / "0").mkdir(parents=True)
    for args in (["runs", "--cancel", run_id], ["runs", "--run", run_id]):
        proc = subprocess.run([sys.executable, "-m", "sforge", "-b", str(bench), "--results",
                               str(results), *args], capture_output=True, text=True)
        assert proc.returncode != 0, (args, proc.stdout)
        assert f"run id {run_id!r}" in proc.stderr and "letters, digits" in proc.stderr
    assert not list(results.rglob("cancel"))
