"""`sforge prove` with real images, judges and work containers (Docker): the oracle agent runs
the task's [reference] and gets full marks, the nop agent submits the workspace as shipped
and stays at the floor, each a Snakemake target that a second run leaves alone; broken tasks
(fixtures/integrity/pays_nothing, broken_oracle) fail their proof. Run records and eval
results carry the image ids Docker reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from sforge.grading.results import GRADING_CONTRACT
from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.paths import FIXTURES, REPO

pytestmark = pytest.mark.docker


@pytest.fixture
def integrity_bench(tmp_path, docker_client):
    made: list[str] = []

    def make(case: str) -> Sforge:
        name = copy_bench(FIXTURES / "integrity" / case, tmp_path / case)
        made.append(name)
        return Sforge(tmp_path / case, tmp_path / f"results-{case}", name)

    yield make
    for name in made:
        remove_images(docker_client, name)


def records(sf: Sforge) -> dict[str, tuple]:
    """agent → (run.json path, its record) of the proof runs made."""
    out = {}
    for path in sorted((sf.results / sf.name / "runs").glob("*/t/0/run.json")):
        rec = json.loads(path.read_text())
        out[rec["agent"]] = (path, rec)
    return out


def image_id(docker_client, tag: str) -> str:
    return docker_client.images.get(tag).id


def test_clean_task_is_proven_both_ways_once(integrity_bench, docker_client, tmp_path):
    sf = integrity_bench("clean")
    first = sf.run("prove", "-j", "2", "--timeout", "120", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    proofs = json.loads(first.stdout)["proofs"]  # one object, nothing else on stdout
    assert {(p["agent"], p["ok"]) for p in proofs} == {("oracle", True), ("nop", True)}
    made = records(sf)
    oracle, nop = made["oracle"][1], made["nop"][1]
    assert oracle["best_rescaled"] == 100.0 and nop["best_rescaled"] == 0.0

    # provenance: resolved image ids as Docker reports them, the bundle, versions, host
    for rec in (oracle, nop):
        assert rec["work_image_id"] == image_id(docker_client, rec["work_image"])
        assert rec["judge_image_id"] == image_id(docker_client, rec["judge_image"])
        assert rec["grading_contract"] == GRADING_CONTRACT and rec["sforge_version"]
        assert rec["host"] == os.uname().nodename and len(rec["bundle"]) >= 12
        assert rec["api_models"] == []  # no model API
    assert oracle["agent_version"] == "oracle-agent" and nop["agent_version"] == "nop-agent"
    results = [json.loads(p.read_text()) for p in
               (sf.results / sf.name / "evals" / "t").glob("*.json")]
    assert len(results) == 2
    for res in results:
        assert res["judge_image_id"] == image_id(docker_client, res["judge_image"])
        assert res["host"] == os.uname().nodename
        assert res["grading_contract"] == GRADING_CONTRACT

    # incremental: nothing changed → the same targets, made already; Snakemake agrees
    stamps = {a: p.stat().st_mtime_ns for a, (p, _) in made.items()}
    again = sf.run("prove", "-j", "2", "--timeout", "120")
    assert again.returncode == 0 and "nothing to make" in again.stderr, again.stderr
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"benchmark": str(sf.bench), "results": str(sf.results)}))
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1",
                          *(str(p) for p, _ in made.values()), "--configfile", str(config)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stderr
    assert {a: p.stat().st_mtime_ns for a, (p, _) in records(sf).items()} == stamps

    # the reference changes → the oracle is proven again under a new target; nop is not
    solve = sf.bench / "tasks" / "t" / "solution" / "solve.sh"
    solve.write_text(solve.read_text() + "# same answer, new script\n")
    third = sf.run("prove", "-j", "2", "--timeout", "120")
    assert third.returncode == 0, third.stdout + third.stderr
    runs = sorted(p.name for p in (sf.results / sf.name / "runs").iterdir())
    assert sum(r.startswith("oracle-") for r in runs) == 2
    assert sum(r.startswith("nop-") for r in runs) == 1

    # the report shows it; each proof agent is one source, whatever its runs
    assert sf.run("report").returncode == 0
    page = (sf.results / sf.name / "report" / "t.html").read_text()
    assert "proven — oracle has full marks" in page
    best = (sf.results / sf.name / "best.csv").read_text()
    assert sorted(line.split(",")[0] for line in best.splitlines()[1:]) == [
        "proof-nop", "proof-oracle"]


@pytest.mark.parametrize(("case", "agent", "words"), [
    ("pays_nothing", "nop", "no-op pays"),
    ("broken_oracle", "oracle", "oracle fails"),
])
def test_a_broken_task_fails_its_proof(integrity_bench, case, agent, words):
    sf = integrity_bench(case)
    proc = sf.run("prove", "--timeout", "120", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    proofs = json.loads(proc.stdout)["proofs"]
    assert [p["ok"] for p in proofs if p["agent"] == agent] == [False]
    assert sf.run("report").returncode == 0
    index = (sf.results / sf.name / "report.html").read_text()
    assert words in index


def test_run_agent_oracle_and_nop(integrity_bench):
    sf = integrity_bench("clean")
    for agent, rescaled in (("oracle", 100.0), ("nop", 0.0)):
        proc = sf.run("run", "--agent", agent, "--task", "t", "--run-id", f"by-hand-{agent}",
                      "--timeout", "120")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rec = json.loads((sf.results / sf.name / "runs" / f"by-hand-{agent}" / "t" / "0" /
                          "run.json").read_text())
        assert rec["best_rescaled"] == rescaled and rec["rounds"] == 2
