"""Image presence by one filtered listing: the benchmark's own names, nothing else, found as
one inspect per tag finds them."""

from __future__ import annotations

from sforge.containers.docker import DockerEngine, _reference_pattern


def test_reference_patterns():
    assert _reference_pattern("edgebench.judge.ad_x:0123456789ab") == "edgebench.*"
    assert _reference_pattern("reg:5000/edgebench.judge.x:0123") == "reg:5000/edgebench.judge.x"
    assert _reference_pattern("busybox:1.36") == "busybox"
    assert _reference_pattern("python:3.11-slim-bookworm") == "python"


def test_listing_agrees_with_inspect(docker_client):
    engine = DockerEngine()
    wanted = ["busybox:1.36", *(f"sforge-absent.judge.t{i}:000000000000" for i in range(6))]
    assert engine.existing_tags(wanted) == {"busybox:1.36"}
    assert {t for t in wanted if engine.image_tags(t)} == {"busybox:1.36"}
