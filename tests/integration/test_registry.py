"""Integration: the registry as a cache of the DAG, with a real registry on loopback."""

from __future__ import annotations

import json

import pytest

from tests.helpers.benches import remove_images

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def summary(proc) -> str:
    return [ln for ln in proc.stdout.splitlines() if ln.startswith("sforge:")][-1]


def local_tags(client, prefix: str) -> set[str]:
    return {t for img in client.images.list() for t in img.tags if t.startswith(f"{prefix}.")}


def test_push_then_pull_on_an_emptied_daemon(minibench, registry, docker_client):
    minibench.run("build", check=True)
    pushed = minibench.run("--registry", registry, "push", check=True)
    assert "7 pushed" in summary(pushed)
    assert all(line.startswith(f"pushed {registry}/{minibench.name}.")
               for line in pushed.stdout.splitlines()[:-1])
    again = minibench.run("--registry", registry, "push", check=True)
    assert "0 pushed, 7 already in" in summary(again)
    tags = local_tags(docker_client, minibench.name)
    assert len(tags) == 7
    remove_images(docker_client, minibench.name)
    assert not local_tags(docker_client, minibench.name)
    pulled = minibench.run("--registry", registry, "pull", check=True)
    assert "7 pulled, 0 already local" in summary(pulled)
    assert local_tags(docker_client, minibench.name) == tags
    assert not any(t.startswith(registry) for img in docker_client.images.list()
                   for t in img.tags)  # only the local names are kept
    assert "0 pulled" in summary(minibench.run("--registry", registry, "pull", check=True))


def test_push_and_pull_json(minibench, registry, docker_client):
    minibench.run("build", "-t", "alpha", check=True)
    pushed = json.loads(minibench.run("--registry", registry, "push", "-t", "alpha", "--json",
                                      check=True).stdout)
    assert pushed["images"] == 3 and len(pushed["pushed"]) == 3
    assert all(r.startswith(f"{registry}/{minibench.name}.") for r in pushed["pushed"])
    remove_images(docker_client, minibench.name)
    pulled = json.loads(minibench.run("--registry", registry, "pull", "-t", "alpha", "--json",
                                      check=True).stdout)
    assert (pulled["images"], pulled["already_local"]) == (3, 0)
    assert {p["remote"] for p in pulled["pulled"]} == set(pushed["pushed"])


def test_warm_registry_empty_daemon_builds_only_the_edit(minibench, registry, docker_client):
    minibench.run("--registry", registry, "build", "--push", check=True)
    remove_images(docker_client, minibench.name)
    # a fresh runner: empty daemon, empty results, one task's judge edited
    run_sh = minibench.bench / "tasks" / "alpha" / "judge" / "run.sh"
    run_sh.write_text(run_sh.read_text() + "# edited\n")
    fresh = minibench.results.parent / "fresh"
    proc = minibench.run("--registry", registry, "build", "--push", results=fresh, check=True)
    line = summary(proc)
    assert "1 built" in line and "6 already present" in line and "1 pushed" in line, line
    sentinels = {p.parent.parent.name + "/" + p.parent.name: json.loads(p.read_text())
                 for p in (fresh / minibench.name / "images").glob("*/*/*.json")}
    assert sentinels["judge/alpha"]["reused"] is False
    assert all(s["reused"] for k, s in sentinels.items() if k != "judge/alpha")
    # the base was pulled to build on; nothing else came down
    assert local_tags(docker_client, minibench.name) == {sentinels["base/tiny"]["tag"],
                                                         sentinels["judge/alpha"]["tag"]}


def test_sentinel_truthful_with_registry(minibench, registry, docker_client):
    minibench.run("--registry", registry, "build", "--push", check=True)
    remove_images(docker_client, minibench.name)
    # gone from the daemon but in the registry: still up to date, nothing rebuilt
    proc = minibench.run("--registry", registry, "build", check=True)
    assert "7 up to date" in summary(proc)
    # gone from both (another registry): rebuilt
    other = minibench.run("--registry", f"{registry}/elsewhere", "build", check=True)
    assert "7 built" in summary(other)


def test_registry_unreachable_is_a_clear_error(minibench, docker_client):
    minibench.run("build", check=True)
    proc = minibench.run("--registry", "127.0.0.1:9", "push")
    assert proc.returncode != 0
    assert f"127.0.0.1:9/{minibench.name}." in proc.stderr
    assert "unreachable" in proc.stderr
    # everything local: a build needs no registry and succeeds
    assert minibench.run("--registry", "127.0.0.1:9", "build").returncode == 0
    # an image missing locally: the named registry must answer, and says why it can't
    tag = json.loads(minibench.sentinels()["judge/gamma"].read_text())["tag"]
    docker_client.images.remove(tag, force=True)
    proc = minibench.run("--registry", "127.0.0.1:9", "build")
    assert proc.returncode != 0 and "unreachable" in proc.stderr
    assert f"127.0.0.1:9/{tag}" in proc.stderr


def test_plan_and_list_ask_the_registry_as_build_does(minibench, registry, docker_client):
    """With a registry, plan and list see what build sees."""
    minibench.run("--registry", registry, "build", "--push", check=True)
    remove_images(docker_client, minibench.name)
    plan = minibench.run("--registry", registry, "plan", check=True)
    assert "7 image(s): 0 to build, 0 present" in plan.stdout, plan.stdout
    listed = json.loads(minibench.run("--registry", registry, "list", "--json",
                                      check=True).stdout)
    assert {t["state"] for t in listed["tasks"]} == {"built"}
    fresh = minibench.results.parent / "fresh"
    plan = minibench.run("--registry", registry, "plan", results=fresh, check=True)
    assert "7 image(s): 0 to build, 7 present" in plan.stdout, plan.stdout
    assert plan.stdout.count("no build (in the registry)") == 7, plan.stdout
    build = minibench.run("--registry", registry, "build", results=fresh, check=True)
    assert "0 built, 7 already present" in summary(build)
