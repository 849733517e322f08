"""Documents that passed their schema are not checked again; anything else always is."""

from __future__ import annotations

import sys

import pytest

from sforge.core import validated
from sforge.core.config import load_config
from sforge.core.errors import SforgeError


def test_a_valid_config_is_remembered_and_a_bad_one_never(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    load_config(overrides={"results": "r1"}, env={})
    known = validated._known()
    assert len(known) == 1
    # checked again only when something changed: the same settings skip jsonschema
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # importing it would now fail
    load_config(overrides={"results": "r1"}, env={})
    load_config(overrides={"results": "r2"}, env={})  # a path: its type is all the schema asks
    with pytest.raises(ImportError):
        load_config(overrides={"results": "r1", "docker_builds": 3}, env={})
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for _ in range(2):  # a bad config is refused every time, never remembered
        with pytest.raises(SforgeError, match=r"\[push\]"):
            load_config(overrides={"push": "yes"}, env={})
    assert len(validated._known()) == 1


def test_unwritable_memory_only_costs_time(tmp_path, monkeypatch):
    (tmp_path / "sforge").write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    load_config(overrides={"results": "r1"}, env={})
    assert validated._known() == []
    with pytest.raises(SforgeError):
        load_config(overrides={"push": "yes"}, env={})
