"""The Snakemake wrapper's promises to the CLI: a profile run's own output never reaches
sforge's stdout, which holds one JSON object under --json."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sforge.workflow import snakemake


def test_a_profile_runs_stdout_goes_to_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho snakemake-chatter\necho snakemake-log >&2\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    profile = tmp_path / "profile"
    profile.mkdir()
    job = snakemake.Run(targets=["x"], config={"results": str(tmp_path / "res")},
                        profile=str(profile))
    assert snakemake.run(job) is True
    out, err = capfd.readouterr()
    assert out == ""
    assert "snakemake-chatter" in err and "snakemake-log" in err
