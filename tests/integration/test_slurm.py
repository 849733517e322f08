"""Integration: cluster execution on a real single-node SLURM.

The session fixture starts SLURM with scripts/slurm_up.sh (installs slurm-wlm + munge when
missing, so it needs root) and always stops it with scripts/slurm_down.sh. Set
SFORGE_SKIP_SLURM=1 to skip these tests knowingly. The profile's executor, `sforge-slurm`,
must be installed: `.venv/bin/pip install ./profiles/slurm/plugin`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.paths import FIXTURES, REPO
from tests.helpers.slurm import copy_sentinels, make_batch, run, scores

pytestmark = pytest.mark.slurm

PROFILE = REPO / "profiles" / "slurm"


def sforge(sf, results: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "sforge", "-b", str(sf.bench), "--results", str(results),
                *args], cwd=sf.bench.parent, timeout=timeout)


@pytest.fixture(scope="session")
def slurm(executor):
    try:
        up = subprocess.run(["bash", str(REPO / "scripts" / "slurm_up.sh")],
                            capture_output=True, text=True, timeout=600)
        if up.returncode != 0:
            pytest.fail(f"scripts/slurm_up.sh failed:\n{up.stdout}\n{up.stderr}")
        yield
    finally:
        subprocess.run(["bash", str(REPO / "scripts" / "slurm_down.sh")],
                       capture_output=True, timeout=120)


SMOKE = """
rule all:
    input: expand("out/{i}.txt", i=range(4))

rule one:
    output: "out/{i}.txt"
    threads: 1
    resources: mem_mb=100, runtime=5
    group: "judge"
    run:
        import os
        with open(output[0], "w") as fh:
            print(os.environ.get("SLURM_JOB_ID", "none"), workflow.is_main_process, file=fh)
"""


def test_trivial_workflow_runs_in_one_slurm_job(slurm, tmp_path):
    (tmp_path / "Snakefile").write_text(SMOKE)
    proc = run([sys.executable, "-m", "snakemake", "--profile", str(PROFILE)], cwd=tmp_path,
               timeout=300)
    lines = {(tmp_path / "out" / f"{i}.txt").read_text().split()[0] for i in range(4)}
    outputs = [(tmp_path / "out" / f"{i}.txt").read_text().split() for i in range(4)]
    # all four jobs ran inside SLURM, grouped into one SLURM job (group-components judge=20)
    assert len(lines) == 1 and lines != {"none"}, outputs
    assert proc.stderr.count("submitted with SLURM jobid") == 1, proc.stderr[-3000:]
    # the Snakefile was parsed on the node as a remote job: rules/common.smk makes no
    # Docker call there (it checks workflow.is_main_process)
    assert all(out[1] == "False" for out in outputs), outputs


def test_parsing_as_a_remote_job_makes_no_docker_call(tmp_path):
    """What a SLURM job does on its node: parse the Snakefile with --mode remote. Parsing is
    pure (stale sentinels are dropped by the CLI or `sforge verify`, never by the Snakefile):
    with the Docker daemon unreachable, neither the main process nor a job tries it."""
    bench = tmp_path / "bench"
    shutil.copytree(REPO / "tests" / "fixtures" / "minibench", bench)
    out = {}
    for mode in ("default", "remote"):
        proc = run([sys.executable, "-m", "snakemake", "images", "--mode", mode, "--dry-run",
                    "--cores", "1", "--directory", str(tmp_path / "results"), "--config",
                    f"benchmark={bench}", f"results={tmp_path / 'results'}"],
                   cwd=REPO, timeout=120, env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
        assert proc.returncode == 0, proc.stderr
        out[mode] = proc.stderr
    for mode in ("default", "remote"):
        assert "cannot check images" not in out[mode]
        assert "Docker" not in out[mode] and "docker" not in out[mode], out[mode]


def test_profile_plans_judges_in_groups(executor, tmp_path):
    """A dry run through the profile, from the repository root as a user types it."""
    bench = tmp_path / "bench"
    shutil.copytree(REPO / "tests" / "fixtures" / "minibench", bench)
    make_batch(bench, 6)
    proc = run([sys.executable, "-m", "snakemake", "grade", "--profile", "profiles/slurm",
                "--dry-run",
                "--directory", str(tmp_path / "results"), "--config", f"benchmark={bench}",
                f"results={tmp_path / 'results'}"],
               cwd=REPO, timeout=120)
    text = proc.stdout + proc.stderr
    assert "Using profiles profiles/slurm and workflow specific profile profiles/default" in text
    assert "Group job judge" in text
    assert text.count("rule evaluate:") == 6


def test_batch_graded_through_slurm_equals_local(slurm, minibench, tmp_path):
    expected = make_batch(minibench.bench, 24)
    name, on_slurm, local = minibench.name, minibench.results, tmp_path / "local"

    # a bare profile name means <repo>/profiles/<name>, wherever sforge runs
    built = sforge(minibench, on_slurm, "build", "--profile", "slurm")
    assert "0 failed" in built.stdout, built.stdout
    copy_sentinels(on_slurm, local, name)

    report = sforge(minibench, on_slurm, "report", "--profile", str(PROFILE), timeout=900)
    assert "submitted with SLURM jobid" in report.stderr
    assert (on_slurm / name / "report.html").is_file()
    sforge(minibench, local, "report", "-j", "2")

    remote, here = scores(on_slurm, name), scores(local, name)
    assert len(remote) == 24
    pd.testing.assert_frame_equal(remote, here)
    got = {(r.source, r.task, r.name): float(r.score) for r in remote.itertuples()}
    assert got == expected
    assert set(remote.valid) == {"True"}
    assert (pd.read_csv(on_slurm / name / "leaderboard.csv").equals(
        pd.read_csv(local / name / "leaderboard.csv")))


def test_plain_snakemake_with_the_profile_grades(slurm, minibench, tmp_path):
    """`snakemake --profile profiles/slurm grade` from the repository root, as the README
    says, grades the same as `sforge grade` locally."""
    make_batch(minibench.bench, 20)
    name, local, plain = minibench.name, tmp_path / "local", tmp_path / "plain"
    sforge(minibench, local, "build", "-j", "2")
    copy_sentinels(local, plain, name)
    sforge(minibench, local, "grade", "-j", "2")
    proc = run([sys.executable, "-m", "snakemake", "grade", "--profile", "profiles/slurm",
                "--directory", str(plain), "--config", f"benchmark={minibench.bench}",
                f"results={plain}"], cwd=REPO, timeout=600)
    assert proc.stderr.count("submitted with SLURM jobid") == 1  # 20 judges, one group

    def evals(root: Path) -> dict[str, tuple]:
        out = {}
        for p in (root / name / "evals").glob("*/*.json"):
            data = json.loads(p.read_text())
            out[p.name] = (data["valid"], data["score"], data["summary"])
        return out

    assert len(evals(plain)) == 20 and evals(plain) == evals(local)


def test_agent_run_through_slurm(slurm, tmp_path, docker_client):
    """`sforge run --profile slurm`: the run job runs inside SLURM and reaches the judge
    service that `sforge run` started, through its relay."""
    name = copy_bench(FIXTURES / "servicebench", tmp_path / "bench")
    sf = Sforge(tmp_path / "bench", tmp_path / "results", name)
    script = tmp_path / "agent.sh"
    script.write_text("echo 7 > answer.txt; sforge-submit\n")
    try:
        sforge(sf, sf.results, "build", "--task", "quick")  # images local: only the run is a job
        sforge(sf, sf.results, "run", "--agent", "script", "--script", str(script),
               "--task", "quick", "--run-id", "s1", "--timeout", "120", "--profile", "slurm",
               timeout=600)
        rec = json.loads((sf.results / name / "runs" / "s1" / "quick" / "0" / "run.json")
                         .read_text())
    finally:
        remove_images(docker_client, name)
    assert rec["slurm_job"] and rec["slurm_job"] != "none"
    assert rec["best_score"] == 7 and rec["rounds"] == 2
