"""The bench scripts clean up their generated benchmarks' images by tag, never by image ID:
generated benchmarks share layers and image IDs through the build cache, and removing an ID
removes every tag on it (it once deleted another benchmark's tags)."""

from __future__ import annotations

import importlib.util
import uuid

import pytest

from tests.helpers.paths import REPO

pytestmark = pytest.mark.docker


def bench_common():
    spec = importlib.util.spec_from_file_location("bench_common", REPO / "bench" / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_cleanup_keeps_another_benchmarks_tag_on_the_same_image(docker_client):
    mine, other = f"bclean{uuid.uuid4().hex[:8]}", f"bkeep{uuid.uuid4().hex[:8]}"
    image = docker_client.images.get("busybox:1.36")
    image.tag(f"{mine}.judge.t1", "aaaaaaaaaaaa")
    image.tag(f"{mine}.base.b", "bbbbbbbbbbbb")
    image.tag(f"{other}.judge.t1", "aaaaaaaaaaaa")  # same image ID, another benchmark
    try:
        removed = bench_common().remove_images(mine)
        assert sorted(removed) == [f"{mine}.base.b:bbbbbbbbbbbb", f"{mine}.judge.t1:aaaaaaaaaaaa"]
        tags = {t for img in docker_client.images.list() for t in img.tags}
        assert f"{other}.judge.t1:aaaaaaaaaaaa" in tags
        assert "busybox:1.36" in tags
        assert not any(t.startswith(mine) for t in tags)
    finally:
        docker_client.images.remove(f"{other}.judge.t1:aaaaaaaaaaaa")
        for tag in (f"{mine}.judge.t1:aaaaaaaaaaaa", f"{mine}.base.b:bbbbbbbbbbbb"):
            if any(tag in img.tags for img in docker_client.images.list()):
                docker_client.images.remove(tag)
