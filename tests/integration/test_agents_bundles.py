"""Both agent CLIs run from their bundles with no network in a busybox-only image and the
python base (real containers)."""

from __future__ import annotations

import subprocess

import pytest

from sforge.runs.agents import MOUNT, load_agent
from sforge.runs.bundle import ensure_bundle


@pytest.mark.docker
@pytest.mark.parametrize("image", ["busybox:1.36", "python:3.11-slim-bookworm"])
@pytest.mark.parametrize("name, expect", [("claude-code", "2.1.328 (Claude Code)"),
                                          ("codex", "codex-cli 0.169.0")])
def test_cli_version_from_bundle_without_network(docker_client, image, name, expect):
    """The bundle (npm's native build, musl's loader copied in) runs read-only in a bare image
    with --network none: nothing is installed in the container."""
    agent = load_agent(name)
    bundle = ensure_bundle(agent)  # from the download cache scripts/setup.sh fills
    out = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", "HOME=/root",
         "-e", f"SFORGE_AGENT={MOUNT}", "-v", f"{bundle}:{MOUNT}:ro", image,
         "/bin/sh", "-c", agent.version], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout
