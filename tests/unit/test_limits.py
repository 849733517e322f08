"""One place for each grading-limit default: the dataclasses; config.yaml only overrides."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from sforge.core.config import defaults, load_config, schema
from sforge.grading.archive_limits import ArchiveLimits
from sforge.grading.contract import archive_limits, container_limits
from sforge.grading.judge_container import ContainerLimits
from tests.helpers.paths import REPO

SECTIONS = {"archive_limits": ArchiveLimits, "judge_limits": ContainerLimits}


def test_shipped_config_holds_no_copy_of_the_defaults() -> None:
    shipped = defaults()
    for section in SECTIONS:
        assert shipped[section] in ({}, None), f"config.yaml repeats {section}'s defaults"
    assert archive_limits(shipped) == ArchiveLimits()
    assert container_limits(shipped) == ContainerLimits()


def test_schema_names_exactly_the_dataclass_fields() -> None:
    for section, cls in SECTIONS.items():
        props = set(schema()["properties"][section]["properties"])
        assert props == {f.name for f in dataclasses.fields(cls)}, section


def test_config_overrides_one_field_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("archive_limits: {max_members: 7}\njudge_limits: {writable: null}\n")
    config = load_config(path, env={})
    assert archive_limits(config) == ArchiveLimits(max_members=7)
    assert container_limits(config) == ContainerLimits(writable=None)


def test_readme_states_the_defaults_the_code_has() -> None:
    readme = " ".join((REPO / "README.md").read_text().split())
    members = re.search(r"`archive_limits` in config\.yaml: ([\d,]+) members, (\d+) GiB", readme)
    assert members, "README no longer states the archive caps"
    assert int(members[1].replace(",", "")) == ArchiveLimits().max_members
    assert int(members[2]) << 30 == ArchiveLimits().max_bytes
    pids = re.search(r"`judge_limits\.pids` in config\.yaml, default (\d+)", readme)
    writable = re.search(r"`judge_limits\.writable`, default (\w+)\)", readme)
    assert pids and writable, "README no longer states the judge limits"
    assert int(pids[1]) == ContainerLimits().pids
    assert writable[1] == ContainerLimits().writable


def test_a_new_results_path_needs_no_new_schema_check(tmp_path: Path, monkeypatch) -> None:
    """Settings whose schema asks only for a type (paths, flags) enter the memory of checks
    that passed as their type: a first eval into a new results directory imports no
    jsonschema; a wrong type or any other change is still checked."""
    import sys

    from sforge.core import validated
    from sforge.core.config import validate
    from sforge.core.errors import SforgeError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = defaults()
    validate({**config, "results": str(tmp_path / "r1")})
    assert len(validated._known()) == 1
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # importing it would now fail
    validate({**config, "results": str(tmp_path / "r2"), "benchmark": "/elsewhere"})
    assert len(validated._known()) == 1
    monkeypatch.delitem(sys.modules, "jsonschema")
    with pytest.raises(SforgeError, match="results"):
        validate({**config, "results": 7})
    with pytest.raises(SforgeError, match="max_members"):
        validate({**config, "archive_limits": {"max_members": 0}})
