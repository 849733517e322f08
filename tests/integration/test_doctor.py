"""`sforge doctor` on this host (the per-node part: tests/integration/test_slurm_nodes.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.docker


def rows(stdout: str) -> dict[str, str]:
    """check name → the rest of its line (the host's rows)."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("host "):
            parts = line.split(None, 3)
            out[parts[2]] = parts[3] if len(parts) > 3 else ""
    return out


def test_doctor_on_the_host_says_what_is_missing_and_how_to_fix(minibench):
    proc = minibench.run("doctor")
    assert proc.returncode == 1
    found = rows(proc.stdout)
    assert set(found) >= {"python", "docker", "judge", "results"}, proc.stdout
    assert found["judge"].startswith("images  FAIL") and "sforge build" in found["judge"]
    assert "OK" in found["docker"] and "OK" in found["python"]
    assert "sforge doctor: 3 OK, 1 to fix" in proc.stdout
    minibench.run("build", check=True)
    proc = minibench.run("doctor", check=True)
    assert "all 3 in the daemon" in proc.stdout and "0 to fix" in proc.stdout

