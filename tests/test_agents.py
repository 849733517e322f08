"""Agent definitions and bundles: the shipped agents load, bad definitions say where, and
both CLIs run from their bundles with no network in a busybox-only image and the python base."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sforge.core.errors import DefinitionError, SforgeError
from sforge.runs.agents import MOUNT, available, load_agent
from sforge.runs.bundle import bundle_digest, ensure_bundle

FIXTURES = Path(__file__).parent / "agent_fixtures"


def test_shipped_agents_load():
    assert {"claude-code", "codex", "script"} <= set(available())
    claude = load_agent("claude-code")
    assert claude.model_api and claude.model_api.key_env == "ANTHROPIC_API_KEY"
    assert claude.model_api.base_url_env == "ANTHROPIC_BASE_URL"
    assert claude.resume and claude.max_resumes > 0
    codex = load_agent("codex")
    assert codex.model_api and codex.model_api.key_env == "OPENAI_API_KEY"
    assert load_agent("script").script


@pytest.mark.parametrize("name, field", [("bad-field", None), ("bad-bundle", "bundle.0")])
def test_bad_definition_names_file_and_field(name, field):
    with pytest.raises(DefinitionError) as err:
        load_agent(name, root=FIXTURES)
    assert str(FIXTURES / name / "agent.toml") in str(err.value)
    if field:
        assert err.value.field == field
    else:
        assert "comand" in str(err.value)


def test_unknown_agent_lists_the_known_ones():
    with pytest.raises(SforgeError, match="available: .*claude-code"):
        load_agent("nope")


def test_script_bundle_is_content_hashed(tmp_path, monkeypatch):
    monkeypatch.setenv("SFORGE_CACHE", str(tmp_path / "cache"))
    agent = load_agent("script")
    script = tmp_path / "a.sh"
    script.write_text("echo one\n")
    first = ensure_bundle(agent, script)
    assert (first / "script.sh").read_text() == "echo one\n"
    assert ensure_bundle(agent, script) == first  # made once
    script.write_text("echo two\n")
    assert bundle_digest(agent, script) not in first.name
    with pytest.raises(SforgeError, match="--script"):
        bundle_digest(agent, None)


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


def test_missing_host_file_says_which_debian_package():
    agent = load_agent("missing-host", root=FIXTURES)
    with pytest.raises(SforgeError, match=r"/nonexistent/sforge-test/libx.so is missing.*"
                                          r"apt-get install libx-test"):
        ensure_bundle(agent)
