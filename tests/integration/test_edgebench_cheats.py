"""Integration (real Docker): EdgeBench's graders score known cheats as the honest grade of
what they implement, and their results reveal no hidden expectation. Each cheat is a
plain-file submission under tests/fixtures/edgebench_cheats/<task>[_<cheat>]/, packed at test
time and graded once by `sforge eval` with the task's real judge."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.archives import archive
from tests.helpers.cli import sforge
from tests.helpers.paths import FIXTURES, REPO

pytestmark = pytest.mark.docker

CHEATS = FIXTURES / "edgebench_cheats"


def evaluated(task: str, sub: Path, tmp_path: Path) -> dict:
    """`sforge eval --json` of the archive `sub` for `task`, with results under tmp_path."""
    proc = sforge("-b", str(REPO / "edgebench"), "--results", str(tmp_path / "results"),
                  "eval", "--task", task, "--archive", str(sub), "--json")
    assert proc.stdout.strip(), proc.stderr[-4000:]
    return json.loads(proc.stdout)


def graded(task: str, tmp_path: Path, cheat: str = "") -> dict:
    """The eval of the fixture folder <task>[_<cheat>] packed as an archive."""
    folder = CHEATS / (f"{task}_{cheat}" if cheat else task)
    files = {p.name: p.read_text() for p in sorted(folder.iterdir()) if p.is_file()}
    return evaluated(task, archive(tmp_path / f"{folder.name}.tar.gz", files), tmp_path)


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


def test_semver_details_name_inputs_only(tmp_path, docker_client):
    # A result's details must not tell a case's expected outcome or group: names and
    # messages built from them would make a lookup-table semver.py score full marks.
    sample = REPO / "edgebench" / "submissions" / "baseline" / "semver_ranges" / "simple.tar.gz"
    out = evaluated("semver_ranges", sample, tmp_path)
    assert out["valid"] is True and out["summary"] == "48/93 tests passed", out["summary"]
    names = [d["name"] for d in out["details"]]
    assert len(names) == len(set(names)) == 93
    for name in names:
        assert re.fullmatch(r"(parse|compare|satisfies)\[.*\]", name, re.S), name
        assert not name.endswith(("-True]", "-False]", "--1]", "-1]", "-0]")), name
        assert "_invalid[" not in name and "_valid[" not in name, name
    failed = [d for d in out["details"] if d["status"] == "FAILED"]
    assert failed
    for d in failed:
        assert d["message"].startswith("wrong answer: "), d
        assert not any(s in d["message"] for s in ("==", " is True", " is False",
                                                   "DID NOT RAISE", "expected")), d
    calls = [name.split("[", 1)[0] for name in names]  # run order, not grouped by kind
    assert sum(a != b for a, b in zip(calls, calls[1:], strict=False)) > 10, calls


def test_compression_output_over_the_cap_counts_as_stored(tmp_path, docker_client):
    # compress() returns 3000 copies of its input: each file fails at the output cap and
    # counts as stored; the grader stays within its memory and gives a valid score.
    out = graded("text_compression", tmp_path, "output_flood")
    assert out["valid"] is True, out.get("reason") or out["summary"]
    assert out["score"] == 340785, out["summary"]
    assert all("compress: over" in d["message"] for d in out["details"]), out["details"]


def test_compression_codec_prints_do_not_reach_its_output(tmp_path, docker_client):
    # zlib level 6 with print() and os.write(1, ...) in the codec: scored as the zlib baseline.
    out = graded("text_compression", tmp_path, "prints")
    assert out["valid"] is True, out.get("reason") or out["summary"]
    assert out["score"] == 70282, out["summary"]
