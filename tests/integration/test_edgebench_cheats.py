"""Integration (real Docker): EdgeBench's graders score known cheats as the honest grade of
what they implement. Each cheat is a plain-file submission under
tests/fixtures/edgebench_cheats/<task>/, packed at test time and graded once by `sforge eval`
with the task's real judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.archives import archive
from tests.helpers.cli import sforge
from tests.helpers.paths import FIXTURES, REPO

pytestmark = pytest.mark.docker

CHEATS = FIXTURES / "edgebench_cheats"


def graded(task: str, tmp_path: Path) -> dict:
    files = {p.name: p.read_text() for p in sorted((CHEATS / task).iterdir()) if p.is_file()}
    sub = archive(tmp_path / f"{task}.tar.gz", files)
    proc = sforge("-b", str(REPO / "edgebench"), "--results", str(tmp_path / "results"),
                  "eval", "--task", task, "--archive", str(sub), "--json")
    assert proc.stdout.strip(), proc.stderr[-4000:]
    return json.loads(proc.stdout)


def test_semver_report_forged_by_the_submission_is_not_the_verdict(tmp_path, docker_client):
    # semver.py implements nothing and rewrites a junit report at exit: every case fails.
    out = graded("semver_ranges", tmp_path)
    assert out["valid"] is True, out.get("reason") or out["summary"]
    assert out["score"] == 0.0 and out["summary"] == "0/93 tests passed", out["summary"]
    assert len(out["details"]) == 93
    assert all(d["status"] == "FAILED" for d in out["details"])


def test_compression_state_in_sysv_shm_does_not_reach_decompress(tmp_path, docker_client):
    # codec.py stores each file in a SysV shared-memory segment: scored as stored, or
    # invalid if the segment survived the scrub; never the 6 bytes of its segment ids.
    out = graded("text_compression", tmp_path)
    if not out["valid"]:
        assert "survived the scrub" in out["summary"], out["summary"]
        return
    assert out["score"] == 340785, out["summary"]
    assert all(d["status"] == "FAILED" for d in out["details"]), out["details"]
