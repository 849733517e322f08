"""The SLURM job run a process belongs to, and whether a recorded run still goes on.

A process on one node cannot see a process on another node, so a grading claim left by a
job whose node died would otherwise only expire at its deadline (the judge's timeout plus a
margin: minutes). SLURM knows better: once it has declared the node dead, the job is no
longer RUNNING there — it is requeued (then pending, or running again elsewhere with a
higher restart count) or failed. So a claim records the job's run (job id, restart count,
node), and another host asks `scontrol show job` whether that very run still goes on.

Only a positive answer counts: where scontrol is missing, fails or answers something
unexpected, the run is taken to go on, and the claim's deadline alone decides.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

# Job states in which the job's processes (may) still run where they were started.
_ACTIVE = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "CONFIGURING", "RESIZING",
           "SIGNALING", "STAGE_OUT"}
_CACHE_S = 2.0  # waiters poll often; ask slurmctld at most this often per job
_TIMEOUT_S = 10.0

_lock = threading.Lock()
_cache: dict[str, tuple[float, dict[str, str] | None]] = {}


def incarnation() -> dict[str, str]:
    """This process's SLURM job run: job id, restart count, node. {} outside a SLURM job."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    run = {"slurm_job": job, "slurm_restarts": os.environ.get("SLURM_RESTART_COUNT") or "0"}
    node = os.environ.get("SLURMD_NODENAME")
    if node:
        run["slurm_node"] = node
    return run


def job_info(job: str) -> dict[str, str] | None:
    """`scontrol show job` of `job` as fields ({} when SLURM no longer knows the job), or
    None when SLURM cannot be asked."""
    now = time.monotonic()
    with _lock:
        hit = _cache.get(job)
        if hit and now - hit[0] < _CACHE_S:
            return hit[1]
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True,
                              text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        info = None
    else:
        if proc.returncode == 0:
            info = dict(re.findall(r"(\w+)=(\S*)", proc.stdout))
        elif "invalid job id" in proc.stderr.lower():
            info = {}  # finished long enough ago to be forgotten (MinJobAge)
        else:
            info = None
    with _lock:
        _cache[job] = (now, info)
    return info


def ended(record: dict) -> str | None:
    """Why the SLURM job run recorded in `record` (see `incarnation`) no longer goes on, or
    None when it may (or SLURM cannot tell)."""
    job = record.get("slurm_job")
    if not isinstance(job, str) or not job.isdigit():
        return None
    info = job_info(job)
    if info is None:
        return None
    run = f"SLURM job {job}"
    restarts = str(record.get("slurm_restarts") or "0")
    node = record.get("slurm_node")
    if not info:
        return f"{run} finished"
    state = info.get("JobState", "")
    if info.get("Restarts", restarts) != restarts:
        return f"{run} was requeued (run {restarts} is over; now {state.lower()})"
    if state not in _ACTIVE:
        return f"{run} is {state.lower() or 'not running'}"
    where = info.get("NodeList", "")
    if node and where and not any(c in where for c in "[,") and where != node:
        return f"{run} runs on {where} now, not on {node}"  # (a one-node job)
    return None
