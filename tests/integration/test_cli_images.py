"""CLI words about images present under their content tag: plan and list say they are
recorded, not built (real images on the Docker daemon)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import paths
from tests.helpers.benches import copy_bench, remove_images
from tests.helpers.cli import sforge

FIXTURE = paths.FIXTURES / "scores_bench"


@pytest.mark.docker
def test_plan_and_list_say_present_images_are_recorded_not_built(tmp_path, docker_client):
    """Images present under their content tag (say, from another results folder) are only
    recorded: plan and list must say so ("9 of 9 image(s) to make" was wrong)."""
    bench = tmp_path / "bench"
    name = copy_bench(FIXTURE, bench)
    results = tmp_path / "res"
    data = json.loads(sforge("list", "--json", "-b", str(bench), "--results",
                             str(results)).stdout)
    tags = [t["work"] for t in data["tasks"]] + [t["judge"] for t in data["tasks"]]
    busybox = docker_client.images.get("busybox:1.36")
    try:
        for tag in tags[:4]:  # four of the ten images are present under their tags
            repo, _, digest = tag.rpartition(":")
            busybox.tag(repo, digest)
        plan = sforge("plan", "-b", str(bench), "--results", str(results))
        assert plan.returncode == 0, plan.stderr
        lines = plan.stdout.splitlines()
        recorded = [line for line in lines if line.startswith("record")]
        assert len(recorded) == 4 and all("present under its tag, no build" in line
                                          for line in recorded)
        assert len([line for line in lines if line.startswith("build")]) == 6
        assert lines[-1] == ("10 image(s): 6 to build, 4 present under their tag (only "
                             "recorded, no build), 0 up to date")
        listing = json.loads(sforge("list", "--json", "-b", str(bench), "--results",
                                    str(results)).stdout)
        states = {t["id"]: t["state"] for t in listing["tasks"]}
        first = data["tasks"][0]["id"]
        assert listing["tasks"][0]["images"]["work"] == "record"
        assert states[first] == "to build: judge; present, to record: work"
        text = sforge("list", "-b", str(bench), "--results", str(results)).stdout
        assert "not built" not in text and "present, to record: work" in text
    finally:
        remove_images(docker_client, name)
