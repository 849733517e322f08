"""`sforge doctor`: is this machine, and every cluster node, ready to build and grade?

The same checks run on the submitting host and, through a profile, in one small job per
SLURM node (the `doctor_node` rule, pinned with --nodelist): Python and the venv, the Docker
daemon, the judge images (present, or pullable from the registry by that node's daemon),
the results directory (readable and writable at the same path, and the host's own file seen
there), the clock (against the shared filesystem's time). A node job also sweeps that node's
orphaned judge containers, like every grading job does. What a node cannot report (its job
never started Python, its report never reached the shared directory) is read from the job's
SLURM log and said with the fix.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from sforge import __version__
from sforge.commands.execution import run_workflow
from sforge.containers import slurmjob
from sforge.containers.docker import engine
from sforge.containers.engine import EngineError, RegistryError
from sforge.containers.owner import node_name
from sforge.core.config import REPO_ROOT
from sforge.core.errors import InfrastructureError
from sforge.core.fileio import atomic_write_json
from sforge.evals.grade import sweep_orphans
from sforge.plan.pipeline import Pipeline
from sforge.workflow.snakemake import resolve_profile

CLOCK_TOLERANCE_S = 5.0
NONCE = "nonce.json"


@dataclass
class Check:
    """One check's outcome on one node, with the fix to print when it failed."""
    node: str
    check: str
    ok: bool
    detail: str
    fix: str = ""


# what one machine checks of itself ------------------------------------------------------
def python_check(node: str) -> Check:
    """The Python and sforge this node runs; fails never, but warns of a venv linking out."""
    exe = Path(sys.executable)
    real = exe.resolve()
    detail = f"Python {platform.python_version()}, sforge {__version__}, {exe}"
    if real != exe:
        detail += f" -> {real}"
    if sys.prefix != sys.base_prefix and not real.is_relative_to(REPO_ROOT):
        detail += (f" (the venv's python links outside the repository: every node needs "
                   f"{sys.base_prefix} at this same path)")
    return Check(node, "python", True, detail)


_REACH_DOCKER = ("start dockerd on {node} and let this user reach it (docker group or "
                 "DOCKER_HOST); `docker info` must work inside a job")


def docker_check(node: str) -> Check:
    """Whether this node reaches its Docker daemon, with the daemon's name and version."""
    try:
        info = engine().info()
    except EngineError as exc:
        if not exc.unreachable:
            return Check(node, "docker", False, f"docker info failed: {exc}",
                         f"check dockerd on {node}")
        return Check(node, "docker", False, str(exc), _REACH_DOCKER.format(node=node))
    except InfrastructureError as exc:  # DOCKER_HOST's transport or TLS settings
        return Check(node, "docker", False, str(exc), _REACH_DOCKER.format(node=node))
    return Check(node, "docker", True,
                 f"daemon {info.get('Name')} (Docker {info.get('ServerVersion')}, "
                 f"{info.get('Images')} images, root {info.get('DockerRootDir')})")


def images_check(pipe: Pipeline, node: str, *, builds_here: bool) -> Check:
    """Judge images in this daemon, or pullable from the registry through it."""
    refs = pipe.images(None, kinds=("judge",))
    if not refs:
        return Check(node, "judge images", True, "no tasks")
    try:
        present = engine().existing_tags(r.tag for r in refs)
    except InfrastructureError as exc:
        return Check(node, "judge images", False, f"cannot list images: {exc}",
                     "fix the docker check first")
    missing = [r for r in refs if r.tag not in present]
    if not missing:
        return Check(node, "judge images", True, f"all {len(refs)} in the daemon")
    if not pipe.registry:
        fix = ("sforge build" if builds_here else
               "set a registry (SFORGE_REGISTRY or benchmark.toml) and build with --push: "
               "nodes pull judge images, they never build")
        return Check(node, "judge images", False,
                     f"{len(missing)} of {len(refs)} not in the daemon (e.g. {missing[0].tag}) "
                     "and no registry is configured", fix)
    try:
        absent = [r for r in missing if not engine().registry_has(pipe.remote(r))]
    except RegistryError as exc:
        return Check(node, "judge images", False,
                     f"{len(missing)} not in the daemon and the registry cannot be asked: {exc}",
                     f"make {pipe.registry} reachable from {node}'s Docker daemon "
                     "(an http registry off loopback needs insecure-registries in daemon.json)")
    if absent:
        return Check(node, "judge images", False,
                     f"{len(absent)} judge image(s) in neither the daemon nor {pipe.registry} "
                     f"(e.g. {absent[0].tag})",
                     "sforge build --push (or sforge push) on the build host")
    return Check(node, "judge images", True,
                 f"{len(present)} in the daemon, {len(missing)} pullable from {pipe.registry}")


def results_check(pipe: Pipeline, node: str, run: str | None) -> Check:
    """Read and write the results directory; on a node, see the host's nonce there too."""
    where = pipe.layout.doctor_dir(run or "local")
    probe = where / f".probe-{node}-{os.getpid()}"
    try:
        where.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex
        probe.write_text(token)
        ok = probe.read_text() == token
        probe.unlink()
    except OSError as exc:
        return Check(node, "results dir", False, f"{pipe.layout.root}: {exc}",
                     f"mount the results directory read-write at {pipe.layout.root} on {node}")
    if not ok:
        return Check(node, "results dir", False, f"{probe} did not read back what was written")
    if run is None:
        return Check(node, "results dir", True, f"{pipe.layout.root} readable and writable")
    nonce = where / NONCE
    try:
        seen = json.loads(nonce.read_text()).get("run")
    except (OSError, ValueError):
        seen = None
    if seen != run:
        return Check(node, "results dir", False,
                     f"writable, but the host's {nonce} is not there: not the same directory",
                     f"share {pipe.layout.root} with {node} at the same absolute path")
    return Check(node, "results dir", True,
                 f"{pipe.layout.root} shared: readable, writable, the host's file seen")


def machine_checks(pipe: Pipeline, node: str, run: str | None = None, *,
                   builds_here: bool = True) -> list[Check]:
    """Every check of one machine: Python, Docker, judge images and the results directory."""
    return [python_check(node), docker_check(node),
            images_check(pipe, node, builds_here=builds_here),
            results_check(pipe, node, run)]


def slurm_job_check(node: str) -> Check:
    """A job can ask SLURM about a job (its own here): what takes over the grading claims of
    a dead node's jobs at once instead of at their deadline."""
    job = slurmjob.incarnation().get("slurm_job")
    if not job:
        return Check(node, "slurm job", False, "not run inside a SLURM job (no SLURM_JOB_ID)")
    info = slurmjob.job_info(job)
    if not info or info.get("JobState") != "RUNNING":
        said = "no answer" if info is None else \
            f"state {info['JobState']}" if info.get("JobState") else "unknown job"
        return Check(node, "slurm job", False, f"`scontrol show job {job}` in the job: {said}",
                     "install SLURM's client tools on the node and let it reach slurmctld "
                     "(SLURM_CONF); without them a grading claim left by a dead node's job "
                     "is taken over only at its deadline (timeout_sec + 300 s)")
    return Check(node, "slurm job", True, f"scontrol sees this job ({job}) running here")


def node_report(pipe: Pipeline, run: str, node: str, out: Path) -> None:
    """The `doctor_node` rule: this node's checks, written to the shared results dir."""
    here = node_name()
    checks = machine_checks(pipe, here, run, builds_here=False)
    checks.append(slurm_job_check(here))
    try:
        swept = sweep_orphans()
        checks.append(Check(here, "orphans", True,
                            f"removed {len(swept)} stale judge container(s)" if swept else
                            "no stale judge containers"))
    except InfrastructureError as exc:
        checks.append(Check(here, "orphans", False, str(exc)))
    if here != node:
        checks.append(Check(here, "placement", False,
                            f"asked for node {node}, ran on {here}",
                            "SLURM ignored --nodelist: check the profile's slurm_extra"))
    atomic_write_json(out, {"node": here, "time": time.time(), "fs_skew": _fs_skew(out.parent),
                            "checks": [asdict(c) for c in checks]})


def _fs_skew(where: Path) -> float | None:
    """This clock minus the shared filesystem's (a file's mtime is the server's on NFS)."""
    probe = where / f".clock-{os.getpid()}"
    try:
        probe.write_text("")
        skew = time.time() - probe.stat().st_mtime
        probe.unlink()
    except OSError:
        return None
    return skew


# the cluster side -------------------------------------------------------------------------
def _profile_values(profile: Path | str) -> dict:
    import yaml

    path = Path(profile) / "config.yaml"
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def slurm_nodes(partition: str | None) -> tuple[list[str], list[Check]]:
    """Nodes of the partition that can take a job; rows for those that cannot."""
    cmd = ["sinfo", "-h", "-N", "-o", "%N|%T"] + (["-p", partition] if partition else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], [Check("host", "slurm", False, f"sinfo: {exc}",
                          "install SLURM's client tools; set SLURM_CONF if the config is "
                          "not /etc/slurm/slurm.conf")]
    if proc.returncode != 0:
        return [], [Check("host", "slurm", False, f"sinfo failed: {proc.stderr.strip()}",
                          "set SLURM_CONF, or check that slurmctld runs")]
    up, rows = [], []
    for line in sorted(set(proc.stdout.split())):
        name, state = line.split("|", 1)
        if re.match(r"(idle|mixed|allocated|completing)", state) and not state.endswith("*"):
            up.append(name)
        else:
            rows.append(Check(name, "slurm", False, f"node is {state}",
                              "scontrol show node " + name + " (Reason=); resume it when fixed"))
    where = f" in partition {partition}" if partition else ""
    rows.insert(0, Check("host", "slurm", bool(up), f"{len(up)} node(s) up{where}: "
                         + (", ".join(up) or "none"),
                         "" if up else "no node can take a job"))
    return up, rows


def _job_log(pipe: Pipeline, run: str, node: str) -> str | None:
    logs = Path(pipe.config["results"]) / ".snakemake" / "slurm_logs" / "rule_doctor_node"
    found = [p for p in logs.glob("**/*.log") if run in str(p) and node in str(p)]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime).read_text(errors="replace")


def missing_report(pipe: Pipeline, run: str, node: str) -> Check:
    """Why a node's job left no report, from its SLURM log."""
    log = _job_log(pipe, run, node)
    venv_python = Path(sys.executable)
    if log is None:
        return Check(node, "job", False,
                     "no report and no SLURM log reached the results directory",
                     f"is {pipe.layout.root} shared with {node} at the same path? "
                     f"(SLURM logs: {Path(pipe.config['results']) / '.snakemake/slurm_logs'})")
    tail = " | ".join(line.strip() for line in log.strip().splitlines()[-3:])
    if str(venv_python) in log and ("No such file or directory" in log or "not found" in log):
        real = venv_python.resolve()
        return Check(node, "python", False,
                     f"the job could not start {venv_python}: it links to {real}, missing on "
                     f"{node} ({tail})",
                     f"install that Python at {sys.base_prefix} on every node (or on the "
                     "shared filesystem), or recreate .venv from a Python every node has "
                     "(e.g. /usr/bin/python3 -m venv .venv)")
    return Check(node, "job", False, f"the doctor job failed: {tail}",
                 "see the SLURM log under <results>/.snakemake/slurm_logs/rule_doctor_node/")


def read_report(pipe: Pipeline, run: str, node: str, window: tuple[float, float]
                ) -> list[Check]:
    """The node's checks, and its clock: the time it wrote its report must fall between
    this host's submitting the job and seeing it done (± the tolerance)."""
    path = pipe.layout.doctor_report(run, node)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return [missing_report(pipe, run, node)]
    checks = [Check(**c) for c in data["checks"]]
    name = data.get("node", node)
    stamp, (start, end) = float(data["time"]), window
    off = stamp - end if stamp > end else stamp - start if stamp < start else 0.0
    fs = data.get("fs_skew")
    off_fs = fs if isinstance(fs, int | float) and abs(fs) > abs(off) else off
    ok = abs(off_fs) <= CLOCK_TOLERANCE_S
    detail = ("within the host's clock" if off == 0 else f"{off:+.1f} s off the host's clock")
    if isinstance(fs, int | float):
        detail += f"; {fs:+.1f} s against the shared filesystem's"
    checks.append(Check(name, "clock", ok, detail,
                        "" if ok else f"run NTP (chrony) on {name}: more than "
                        f"{CLOCK_TOLERANCE_S:g} s off"))
    return checks


def doctor(pipe: Pipeline, profile: str | None, execution) -> list[Check]:
    """Every check: the host's own, then (with a SLURM profile) one job per node."""
    host = f"host {node_name()}"
    checks = machine_checks(pipe, host)
    if not profile:
        return checks
    resolved = resolve_profile(profile)
    values = _profile_values(resolved)
    executor = str(values.get("executor", ""))
    if "slurm" not in executor:
        checks.append(Check(host, "profile", False,
                            f"{profile}: executor {executor or '?'}: per-node checks need a "
                            "SLURM profile", ""))
        return checks
    if executor == "sforge-slurm":
        import importlib.util

        if importlib.util.find_spec("snakemake_executor_plugin_sforge_slurm") is None:
            checks.append(Check(host, "profile", False, "the sforge-slurm executor is not "
                                "installed", ".venv/bin/pip install ./profiles/slurm/plugin"))
            return checks
    partition = (values.get("default-resources") or {}).get("slurm_partition")
    nodes, rows = slurm_nodes(partition)
    checks += rows
    if not nodes:
        return checks
    run = time.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
    atomic_write_json(pipe.layout.doctor_dir(run) / NONCE, {"run": run})
    start = time.time()
    run_workflow(pipe.config, [pipe.layout.doctor_report(run, n) for n in nodes],
                 execution, quiet=True)
    window = (start, time.time())
    for node in nodes:
        checks += read_report(pipe, run, node, window)
    return checks


def table(checks: list[Check]) -> str:
    """The checks as a text table, one row per node and check, long cells wrapped."""
    from tabulate import tabulate

    rows = [(c.node, c.check, "OK" if c.ok else "FAIL", c.detail, c.fix) for c in checks]
    return tabulate(rows, headers=("node", "check", "", "detail", "fix"), tablefmt="simple",
                    maxcolwidths=[None, None, None, 70, 50])
