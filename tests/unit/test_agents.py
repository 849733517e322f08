"""Agent definitions and bundles: the shipped agents load, bad definitions say where, bundles
are content-hashed (the CLIs run from them: tests/integration/test_agents_bundles.py)."""

from __future__ import annotations

import pytest

from sforge.core.errors import DefinitionError, SforgeError
from sforge.runs.agents import available, load_agent
from sforge.runs.bundle import bundle_digest, ensure_bundle
from tests.helpers import paths

FIXTURES = paths.FIXTURES / "agents"


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


def test_missing_host_file_says_which_debian_package():
    agent = load_agent("missing-host", root=FIXTURES)
    with pytest.raises(SforgeError, match=r"/nonexistent/sforge-test/libx.so is missing.*"
                                          r"apt-get install libx-test"):
        ensure_bundle(agent)


def test_an_agent_toml_that_is_not_utf8_is_named(tmp_path):
    """An agent definition that is not UTF-8 text is one error naming the file and the byte."""
    import pytest

    from sforge.core.errors import SforgeError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "agent.toml").write_bytes(b'description = "caf\xe9"\n')
    with pytest.raises(SforgeError, match=r"agent.toml: not UTF-8 text \(byte 0xe9"):
        load_agent("x", root=tmp_path)
