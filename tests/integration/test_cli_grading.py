"""Integration (real Docker): what grading says while it works, each warning once, and
`sforge clean` listing and removing exactly what nothing refers to any more."""

from __future__ import annotations

import json

import pytest

from tests.helpers.archives import archive
from tests.helpers.paths import REPO
from tests.helpers.servers import free_port

pytestmark = pytest.mark.docker


def test_progress_lines_warnings_once_and_clean(minibench, tmp_path, docker_client):
    sf = minibench
    # An optional registry (benchmark.toml's) that does not answer: one warning, not one per
    # image, and the build goes on without it.
    toml = sf.bench / "benchmark.toml"
    toml.write_text(toml.read_text() + f'registry = "127.0.0.1:{free_port()}"\n')
    config = tmp_path / "config.yaml"  # archives of more than 3 members are invalid
    config.write_text((REPO / "config.yaml").read_text().replace(
        "archive_limits: {}", "archive_limits: {max_members: 3}"))
    build = sf.run("build", "-j", "2", "--config", str(config), check=True)
    assert build.stderr.count("building without the registry") == 1, build.stderr

    subs = sf.bench / "submissions"
    archive(subs / "agent-a" / "alpha" / "r1.tar.gz", {"answer.txt": "7\n"})
    archive(subs / "agent-b" / "beta" / "r1.tar.gz",
            {f"f{i}.txt": "x" for i in range(5)} | {"answer.txt": "1\n"})
    grade = sf.run("grade", "-v", "--config", str(config))
    assert grade.returncode == 0, grade.stderr
    lines = grade.stderr.splitlines()
    assert "alpha  agent-a  score 7  answer 7" in lines
    invalid = [line for line in lines if line.startswith("beta  agent-b  INVALID: ")]
    assert len(invalid) == 1 and "archive exceeds 3 members" in invalid[0], grade.stderr
    # no raw Snakemake chatter without -vv
    for chatter in ("Finished jobid", "steps (", "Building DAG", "Select jobs"):
        assert chatter not in grade.stderr, grade.stderr
    assert grade.stderr.count("building without the registry") <= 1

    # the report lists the invalid one with its reason and a link to its result
    report = sf.run("report", "--config", str(config), check=True)
    root = sf.results / sf.name
    # every rule wrote its log where its `log:` says
    for step in ("scores", "best", "leaderboard", "report"):
        assert "done in" in (root / "logs" / "steps" / f"{step}.log").read_text(), step
    assert "2 submission(s); 2 task(s) computed" in (root / "logs" / "steps" / "scores.log"
                                                      ).read_text()
    assert len(list((root / "evals").glob("*/*.log"))) == 2  # the judges' logs
    assert list((root / "logs" / "build" / "judge").glob("alpha-*.log"))
    html = (root / "report.html").read_text()
    assert "archive exceeds 3 members" in html
    key = json.loads(next((root / "evals" / "beta").glob("*.json")).read_text())["key"]
    assert f'href="evals/beta/{key}.json"' in html
    assert (root / "report" / "beta.html").is_file()
    assert "nan" not in report.stdout

    # clean: a new judge for alpha leaves its old image, sentinel, log and result behind
    before = {p.name for p in (root / "evals" / "alpha").glob("*.json")}
    old_judge = json.loads(sf.run("list", "--json").stdout)["tasks"][0]["judge"]
    (sf.bench / "tasks" / "alpha" / "judge" / "run.sh").write_text(
        (sf.bench / "tasks" / "alpha" / "judge" / "run.sh").read_text() + "# v2\n")
    # clean under the configuration the results were graded with (its limits are in their keys)
    listed = sf.run("clean", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    assert f"image      {old_judge}" in out
    assert "sentinel" in out and "build log" in out and f"{before.pop()[:-5]}" in out
    assert "clean --yes" in out
    for current in ("beta", "gamma", "tiny"):  # still referenced: never listed
        assert f".judge.{current}:" not in out and f".base.{current}:" not in out
    assert "/evals/beta/" not in out
    assert docker_client.images.get(old_judge)  # listing removes nothing
    removed = sf.run("clean", "--yes", "--config", str(config), check=True)
    assert "removed" in removed.stdout
    assert not any(old_judge in t for img in docker_client.images.list() for t in img.tags)
    assert list((root / "evals" / "alpha").glob("*.json")) == []
    assert list((root / "evals" / "beta").glob("*.json"))  # beta's result stays
    assert sf.run("clean", "--config", str(config), check=True).stdout.strip() == \
        "sforge clean: nothing unreferenced"


def test_eval_exits_1_on_an_invalid_verdict(minibench, tmp_path):
    """A script tells a valid verdict (0) from an INVALID one (1) by the exit code alone,
    with --json too, and from an error it could not decide (3: an archive that is missing)."""
    good = archive(tmp_path / "good.tar.gz", {"answer.txt": "7\n"})
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tar archive at all" * 4)
    valid = minibench.run("eval", "-t", "alpha", "-a", str(good))
    assert valid.returncode == 0, valid.stderr
    assert valid.stdout.startswith("alpha: valid score=7.0")
    invalid = minibench.run("eval", "-t", "alpha", "-a", str(bad))
    assert invalid.returncode == 1, invalid.stderr
    assert invalid.stdout.startswith("alpha: INVALID") \
        and invalid.stdout.count("not a readable tar archive") == 1  # the reason, said once
    again = minibench.run("eval", "-t", "alpha", "-a", str(bad), "--json")  # already graded
    assert again.returncode == 1 and json.loads(again.stdout)["valid"] is False
    assert "already graded" in again.stderr
    missing = minibench.run("eval", "-t", "alpha", "-a", str(tmp_path / "none.tar"), "--json")
    assert missing.returncode == 3 and json.loads(missing.stdout)["code"] == 3
    # grade, report and clean with --json: one object each, and nothing else on stdout
    grade = json.loads(minibench.run("grade", "--json", check=True).stdout)
    assert grade["failed"] == 0 and grade["up_to_date"] == grade["distinct"] >= 2, grade
    report = json.loads(minibench.run("report", "--json", check=True).stdout)
    assert report["ok"] and report["report"].endswith("report.html")
    assert [row["source"] for row in report["leaderboard"]] == ["manual"], report
    assert type(report["leaderboard"][0]["score"]) is float, report  # numbers, not text
    assert type(report["leaderboard"][0]["rank"]) is int, report
    clean = json.loads(minibench.run("clean", "--json", check=True).stdout)
    assert clean["removed"] is False and clean["bytes"] == sum(i["size"] for i in clean["items"])
