"""A claim left by a SLURM job on another node is stale as soon as SLURM says that job run is
over (requeued, ended, moved), not only at its deadline; without a positive answer from
SLURM the deadline decides. A scripted `scontrol` on PATH stands in for slurmctld here; the
real cluster is tests/integration/test_slurm_nodes.py (a node killed mid-run)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sforge.containers import slurmjob
from sforge.grading import claims


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Make `scontrol -o show job ID` answer with the given line (or error); → setter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(slurmjob, "_cache", {})

    def answer(line: str | None, *, rc: int = 0, err: str = "") -> Path:
        calls = tmp_path / "calls"
        body = f'echo "$*" >> {calls}\n'
        body += f"printf '%s\\n' '{line}'\n" if line is not None else ""
        body += f"echo '{err}' >&2\nexit {rc}\n"
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
        slurmjob._cache.clear()
        return calls

    return answer


def job(state: str, restarts: int, node: str) -> str:
    return (f"JobId=42 JobName=sforge UserId=root(0) JobState={state} Reason=None "
            f"Requeue=1 Restarts={restarts} BatchFlag=1 NodeList={node} BatchHost={node} "
            "Command=/work/run.sh WorkDir=/work")


def claim_from_node(tmp_path: Path, **extra: str) -> tuple[Path, dict]:
    """A claim as a job on node n1 (run 0 of job 42) wrote it, live deadline."""
    path = tmp_path / "k.claim"
    record = {"host": "n1", "pid": "77", "start": "1", "token": "t",
              "deadline": time.time() + 3600, "slurm_job": "42", "slurm_restarts": "0",
              "slurm_node": "n1", **extra}
    path.write_text(json.dumps(record))
    return path, claims.read_claim(path)


def test_a_claim_records_the_jobs_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    held = claims.try_claim(tmp_path / "k.claim", 60)
    assert held is not None
    record = claims.read_claim(held.path)
    assert (record["slurm_job"], record["slurm_restarts"], record["slurm_node"]) == \
        ("42", "2", "n7")
    monkeypatch.delenv("SLURM_RESTART_COUNT")  # a job's first run has no restart count
    assert slurmjob.incarnation()["slurm_restarts"] == "0"
    for name in ("SLURM_JOB_ID", "SLURMD_NODENAME"):
        monkeypatch.delenv(name)
    assert slurmjob.incarnation() == {}


def test_the_owners_run_still_going_keeps_its_claim(tmp_path: Path, scontrol) -> None:
    calls = scontrol(job("RUNNING", 0, "n1"))
    path, record = claim_from_node(tmp_path)
    assert claims.stale_reason(path, record) is None
    assert claims.stale_reason(path, record) is None
    assert calls.read_text().split("\n")[0] == "-o show job 42"
    assert len(calls.read_text().splitlines()) == 1  # asked once, then the answer is reused


@pytest.mark.parametrize(("answer", "reason"), [
    (job("PENDING", 1, "(null)"), "SLURM job 42 was requeued (run 0 is over; now pending)"),
    (job("RUNNING", 1, "n2"), "SLURM job 42 was requeued (run 0 is over; now running)"),
    (job("NODE_FAIL", 0, "n1"), "SLURM job 42 is node_fail"),
    (job("CANCELLED", 0, "n1"), "SLURM job 42 is cancelled"),
    (job("RUNNING", 0, "n2"), "SLURM job 42 runs on n2 now, not on n1"),
])
def test_a_run_slurm_says_is_over_makes_the_claim_stale(tmp_path: Path, scontrol, answer,
                                                        reason) -> None:
    scontrol(answer)
    path, record = claim_from_node(tmp_path)
    assert claims.stale_reason(path, record) == reason
    claim, product = claims.acquire(path, 60, lambda: None)  # taken over at once
    assert claim is not None and product is None
    assert claims.read_claim(path)["token"] == claim.token


def test_a_job_on_several_nodes_keeps_the_claim_of_any_of_them(tmp_path: Path,
                                                               scontrol) -> None:
    scontrol(job("RUNNING", 0, "n[0-1]").replace("BatchHost=n[0-1]", "BatchHost=n0"))
    path, record = claim_from_node(tmp_path)
    assert claims.stale_reason(path, record) is None


def test_a_job_slurm_forgot_is_over(tmp_path: Path, scontrol) -> None:
    scontrol(None, rc=1, err="slurm_load_jobs error: Invalid job id specified")
    path, record = claim_from_node(tmp_path)
    assert claims.stale_reason(path, record) == "SLURM job 42 finished"


@pytest.mark.parametrize("broken", ["controller down", "no scontrol"])
def test_no_answer_from_slurm_leaves_it_to_the_deadline(tmp_path: Path, scontrol,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        broken: str) -> None:
    if broken == "no scontrol":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    else:
        scontrol(None, rc=1, err="slurm_load_jobs error: Unable to contact slurm controller")
    path, record = claim_from_node(tmp_path)
    assert claims.stale_reason(path, record) is None
    path, record = claim_from_node(tmp_path, deadline=time.time() - 1)
    assert claims.stale_reason(path, record) == "deadline passed"


def test_a_claim_outside_slurm_asks_nobody(tmp_path: Path, scontrol) -> None:
    calls = scontrol(job("PENDING", 1, "(null)"))
    path = tmp_path / "k.claim"
    path.write_text(json.dumps({"host": "elsewhere", "pid": "1", "token": "t",
                                "deadline": time.time() + 60}))
    assert claims.stale_reason(path, claims.read_claim(path)) is None
    assert not calls.exists()
