"""Agent runs end to end with the script agent: real work containers, a real judge service
started by `sforge run`, real judges, on two EdgeBench tasks (a copy whose judge timeout is
short, so the archive that hangs times out quickly)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.model_server import ScriptedModel
from tests.helpers.paths import REPO
from tests.helpers.runs import run_containers

pytestmark = pytest.mark.docker

TASKS = {"knapsack": ("solve.py", "greedy.tar.gz"), "semver_ranges": ("semver.py", "simple.tar.gz")}
JUDGE_TIMEOUT = 8


def _good(task: str) -> str:
    name, archive = TASKS[task]
    path = REPO / "edgebench" / "submissions" / "baseline" / task / archive
    with tarfile.open(path) as tar:
        for m in tar:
            if m.name.lstrip("./") == name:
                return tar.extractfile(m).read().decode()
    raise AssertionError(f"{name} not in {path}")


def three_archives_script(path: Path) -> Path:
    """good, invalid (does not run), one that hangs past the judge's timeout; then it leaves
    the good file in place (same bytes and mtime: the final archive is the good one)."""
    cases = "\n".join(
        f"  {task}) f={name}; cat > /tmp/good <<'SFORGE_EOF'\n{_good(task)}SFORGE_EOF\n  ;;"
        for task, (name, _) in TASKS.items())
    path.write_text(f"""set -u
case "$SFORGE_TASK" in
{cases}
esac
cp -p /tmp/good "$f"; touch -d @1700000000 "$f"
echo "== good"; sforge-submit; echo "exit $?"
echo "== invalid"; echo 'this is ( not python' > "$f"; sforge-submit; echo "exit $?"
echo "== hangs"; printf 'while True:\\n    pass\\n' > "$f"; sforge-submit; echo "exit $?"
cp -p /tmp/good "$f"; touch -d @1700000000 "$f"
""")
    return path


@pytest.fixture(scope="module")
def edge(tmp_path_factory, docker_client):
    root = tmp_path_factory.mktemp("runs")
    name = copy_bench(REPO / "edgebench", root / "bench")
    # only the two tasks, and none of the bundled sample submissions: the tables then hold
    # exactly what the runs submitted
    for other in ("log_triage", "text_compression"):
        shutil.rmtree(root / "bench" / "tasks" / other)
    shutil.rmtree(root / "bench" / "submissions")
    for task in TASKS:
        toml = root / "bench" / "tasks" / task / "task.toml"
        toml.write_text(toml.read_text().replace("timeout_sec = 300",
                                                 f"timeout_sec = {JUDGE_TIMEOUT}"))
    sf = Sforge(root / "bench", root / "results", name)
    yield sf
    remove_images(docker_client, name)


def test_script_agent_two_tasks(edge, tmp_path, docker_client):
    script = three_archives_script(tmp_path / "agent.sh")
    args = ["run", "--agent", "script", "--script", str(script), "--run-id", "r1",
            "--task", "knapsack", "--task", "semver_ranges", "--cpus", "1", "-j", "2",
            "--timeout", "300", "--json"]
    proc = edge.run(*args, check=True)
    rows = {r["task"]: r for r in json.loads(proc.stdout)["runs"]}  # stdout: only the JSON
    for chatter in ("Finished jobid", "steps (", "Building DAG", "Select jobs", "rule agent_run"):
        assert chatter not in proc.stderr, proc.stderr  # sforge's progress, not Snakemake's
    assert {r["state"] for r in rows.values()} == {"done"}
    root = edge.results / edge.name
    for task in TASKS:
        rec = json.loads((root / "runs" / "r1" / task / "0" / "run.json").read_text())
        subs = rec["submissions"]
        # the run record counts every round: three from the agent, then the final workspace
        assert rec["rounds"] == 4 and [s["round"] for s in subs] == [1, 2, 3, 4]
        good, bad, hang, final = subs
        assert good["valid"] and good["score"] > 0
        assert hang["valid"] is False and "timed out" in hang["summary"]
        assert bad["valid"] is False or bad["score"] == 0
        assert final["final"] and final["sha256"] == good["sha256"]
        assert rec["best_score"] == good["score"] and rec["best_round"] == 1
        assert rec["best_rescaled"] == good["rescaled"]
        assert rec["final"]["score"] == good["score"]
        assert rec["exit_code"] == 0 and rec["stopped_by"] == "agent"
        assert not rec["timed_out"] and not rec["interrupted"]
        assert rec["source"] == "run-r1-0" and rec["agent"] == "script"
        assert "== hangs" in (root / "runs" / "r1" / task / "0" / "agent.log").read_text()
        assert rows[task]["best"] == good["score"]
    assert not run_containers(docker_client, edge, "r1")

    # the scores tables: one row per distinct archive of the run's source, with elapsed_s
    edge.run("report", check=True)
    scores = pd.read_csv(root / "scores.csv")
    mine = scores[scores["source"] == "run-r1-0"]
    for task in TASKS:
        rows_t = mine[mine["task"] == task]
        assert len(rows_t) == 3, rows_t  # good (again as final), invalid, hangs
        assert rows_t["elapsed_s"].notna().all()
    best = pd.read_csv(root / "best.csv")
    got = best[best["source"] == "run-r1-0"].set_index("task")["score"].to_dict()
    for task in TASKS:
        rec = json.loads((root / "runs" / "r1" / task / "0" / "run.json").read_text())
        assert got[task] == rec["best_score"]

    # the same command again makes nothing
    before = {t: (root / "runs" / "r1" / t / "0" / "run.json").stat().st_mtime_ns
              for t in TASKS}
    again = edge.run(*args, check=True)
    assert "nothing to make" in again.stderr  # with --json, stdout is only the JSON
    assert json.loads(again.stdout)["runs"]
    assert before == {t: (root / "runs" / "r1" / t / "0" / "run.json").stat().st_mtime_ns
                      for t in TASKS}


def test_killed_run_is_interrupted_then_rerun_finishes(edge, tmp_path, docker_client):
    script = tmp_path / "slow.sh"
    script.write_text("echo started; printf 'print(1)\\n' > semver.py; sleep 8\n")
    args = [sys.executable, "-m", "sforge", "-b", str(edge.bench), "--results",
            str(edge.results), "run", "--agent", "script", "--script", str(script),
            "--run-id", "r2", "--task", "semver_ranges", "--timeout", "120"]
    folder = edge.results / edge.name / "runs" / "r2" / "semver_ranges" / "0"
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=edge.bench.parent, start_new_session=True)
    deadline = time.monotonic() + 120
    while not run_containers(docker_client, edge, "r2"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.2)
    time.sleep(1)
    os.kill(proc.pid, signal.SIGTERM)  # what a scheduler or `kill` sends
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode != 0, out
    assert not (folder / "run.json").exists()
    attempt = json.loads((folder / "attempt-1.json").read_text())
    assert attempt["interrupted"] and attempt["stopped_by"] == "interrupted"
    assert attempt["final"]["final"]  # the workspace was still graded
    assert not run_containers(docker_client, edge, "r2")
    listed = edge.run("runs", "--run", "r2", "--json", check=True)
    assert json.loads(listed.stdout)["runs"][0]["state"] == "interrupted"

    done = subprocess.run(args, capture_output=True, text=True, cwd=edge.bench.parent,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rec = json.loads((folder / "run.json").read_text())
    assert rec["attempt"] == 2 and not rec["interrupted"]
    assert rec["service_run"] != attempt["service_run"]  # a fresh attempt, a new token
    assert not run_containers(docker_client, edge, "r2")


def test_bad_run_flags(edge, tmp_path):
    proc = edge.run("run", "--agent", "script", "--task", "knapsack")
    assert proc.returncode == 2 and "--script" in proc.stderr
    proc = edge.run("run", "--agent", "nope", "--task", "knapsack")
    assert proc.returncode == 3 and "unknown agent 'nope'" in proc.stderr
    script = tmp_path / "s.sh"
    script.write_text("true\n")
    proc = edge.run("run", "--agent", "script", "--script", str(script), "--task", "nope")
    assert proc.returncode == 3 and "unknown task" in proc.stderr
    # a run id names one set of settings (run r1 exists: test_script_agent_two_tasks)
    if (edge.results / edge.name / "runs" / "r1" / "spec.json").exists():
        proc = edge.run("run", "--agent", "script", "--script", str(script), "--run-id", "r1",
                        "--task", "knapsack")
        assert proc.returncode == 3 and "other settings" in proc.stderr
        assert "script" in proc.stderr and "use a new --run-id" in proc.stderr


KEY = "sk-ant-test-" + "5ec2e7" * 4  # what a real key looks like to grep
KEYLIKE = "sk-ant-test-[0-9a-f]\\{8\\}"  # a pattern that matches the key, not itself


def scripted_run(edge, agent: str, run_id: str, keylike: str, env: dict[str, str],
                 timeout: int):
    """`sforge run --agent AGENT` against a scripted model server whose two tool calls write
    a solution and submit it with sforge-submit, then look for the key (`keylike`, a grep
    pattern that matches the key, not itself) in the container's env and files.
    → (run record, the model server with its requests, the run's folder)."""
    model = ScriptedModel(commands=[
        "printf 'print(1)\\n' > semver.py && sforge-submit; echo SUBMITTED",
        f"if env | /bin/grep -q '{keylike}'; then echo ENV-LEAK; else echo ENV-CLEAN; fi; "
        f"if /bin/grep -rsq '{keylike}' / --exclude-dir=proc --exclude-dir=sys; "
        "then echo FILE-LEAK; else echo FILE-CLEAN; fi",
    ]).start()
    try:
        proc = edge.run("run", "--agent", agent, "--task", "semver_ranges",
                        "--run-id", run_id, "--timeout", str(timeout), "--max-resumes", "0",
                        "--model-api", model.url, env=env)
    finally:
        model.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = edge.results / edge.name / "runs" / run_id / "semver_ranges" / "0"
    rec = json.loads((folder / "run.json").read_text())
    # the graded submission made through the agent's shell tool, then the final workspace
    assert rec["rounds"] == 2 and rec["submissions"][0]["state"] == "done", rec
    assert rec["submissions"][0]["valid"] is not None and rec["final"]["final"]
    assert rec["final"]["sha256"] == rec["submissions"][0]["sha256"]
    return rec, model, folder


def assert_probed_and_key_nowhere(edge, docker_client, run_id: str, tool_output: str,
                                  key: str) -> None:
    assert "SUBMITTED" in tool_output and "(round 1)" in tool_output, tool_output[-2000:]
    assert "ENV-CLEAN" in tool_output and "FILE-CLEAN" in tool_output, tool_output[-2000:]
    # nothing sforge wrote holds the key: records, transcript, logs, service state
    for path in (edge.results).rglob("*"):
        if path.is_file() and path.stat().st_size < 50 << 20:
            assert key.encode() not in path.read_bytes(), path
    assert not run_containers(docker_client, edge, run_id)


def test_claude_code_end_to_end_through_the_key_adding_proxy(edge, tmp_path, docker_client):
    """The real claude CLI (native build from the bundle) against a scripted Messages-API
    server on loopback, through sforge's proxy: it writes a solution with its Bash tool,
    submits it with sforge-submit, and looks for the key in its env and files."""
    rec, model, folder = scripted_run(edge, "claude-code", "claude1", KEYLIKE,
                                      {"ANTHROPIC_API_KEY": KEY}, 240)
    # the upstream got the real key on every call; the container sent only a placeholder
    assert model.requests and {r["x-api-key"] for r in model.requests} == {KEY}
    # token usage from the replies, and the transcript beside the record
    assert rec["usage"]["calls"] == len(model.requests) and rec["tokens"] > 0
    assert (folder / "transcript.jsonl").read_text().count("\n") == len(model.requests)
    # the model as the API's replies named it (the scripted server names the one asked for),
    # and the CLI's version as its own --version prints it in the container
    assert set(rec["api_models"]) == {r["body"]["model"] for r in model.requests}
    assert "2.1.328" in rec["agent_version"]
    assert_probed_and_key_nowhere(
        edge, docker_client, "claude1",
        json.dumps([r["body"]["messages"] for r in model.requests[-1:]]), KEY)


def test_codex_end_to_end_through_the_key_adding_proxy(edge, docker_client):
    """The real codex CLI (static build from the bundle) against a scripted Responses-API
    server on loopback, through sforge's proxy: its shell tool writes a solution and submits
    it with sforge-submit, and looks for the key in its env and files."""
    key = "sk-proj-test-OPENAI-0123456789"
    rec, model, _ = scripted_run(edge, "codex", "codex1", "sk-proj-test-OPENAI-[0-9]\\{10\\}",
                                 {"OPENAI_API_KEY": key}, 120)
    assert rec["exit_code"] == 0 and rec["stopped_by"] == "agent"
    # every call reached the scripted server through the proxy, with the real key only there
    assert [r["path"] for r in model.requests] == ["/v1/responses"] * 3, model.requests
    assert {r["authorization"] for r in model.requests} == {f"Bearer {key}"}
    assert rec["usage"]["calls"] == 3 and rec["tokens"] > 0
    assert rec["api_models"] == ["gpt-5-codex"] and "0.169.0" in rec["agent_version"]
    # the report's run page reads codex's Responses transcript: its shell calls and outputs
    edge.run("report", check=True)
    page = (edge.results / edge.name / "report" / "runs" / "codex1"
            / "semver_ranges-0.html").read_text()
    assert page.count('<details class="call"') == 3
    assert page.count('<span class="kind">tool-call</span> exec_command') >= 2
    assert "sforge-submit; echo SUBMITTED" in page and "ENV-CLEAN" in page
    assert '<span class="kind">tool-result</span>' in page
    assert_probed_and_key_nowhere(
        edge, docker_client, "codex1",
        json.dumps([i for i in model.requests[-1]["body"]["input"]
                    if i.get("type") == "function_call_output"]), key)
