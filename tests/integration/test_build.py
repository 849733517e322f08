"""Integration: the build DAG against the real Docker daemon."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.paths import FIXTURES, REPO

pytestmark = pytest.mark.docker

ALL = {"base/tiny", "work/alpha", "judge/alpha", "work/beta", "judge/beta", "work/gamma",
       "judge/gamma"}


def built(proc) -> int:
    """The number the summary line gives as built (images really made by docker build)."""
    line = [ln for ln in proc.stdout.splitlines() if "image(s):" in ln][-1]
    return int(line.split("image(s):")[1].split("built")[0])


def stamps(sf) -> set[tuple[str, str]]:
    """(image, sentinel) pairs of every sentinel, old hashes included."""
    root = sf.results / sf.name / "images"
    return {(f"{p.parent.parent.name}/{p.parent.name}",
             p.stem + json.loads(p.read_text())["image_id"]) for p in root.glob("*/*/*.json")}


def changed(before, after) -> set[str]:
    return {key for key, _ in after - before}


def test_full_build_then_noop(minibench, docker_client):
    first = minibench.run("build", "-j", "2", check=True)
    assert built(first) == 7
    sentinels = minibench.sentinels()
    assert set(sentinels) == ALL
    for key, path in sentinels.items():
        record = json.loads(path.read_text())
        assert record["tag"].startswith(f"{minibench.name}.{key.replace('/', '.')}:")
        assert record["tag"].endswith(path.stem) and len(path.stem) == 12
        assert docker_client.images.get(record["tag"]).id == record["image_id"]
        assert record["built_at"] and os.path.exists(record["log"])
    again = minibench.run("build", check=True)
    assert built(again) == 0 and "7 up to date" in again.stdout
    assert "Step" not in again.stderr


def test_fresh_copy_builds_nothing(minibench, tmp_path):
    minibench.run("build", check=True)
    before = stamps(minibench)
    # A copy with every mtime new, same results dir: nothing to do.
    copy = tmp_path / "copy"
    shutil.copytree(minibench.bench, copy)
    time.sleep(0.01)
    for path in copy.rglob("*"):
        os.utime(path)
    proc = minibench.run("build", bench=copy, check=True)
    assert built(proc) == 0 and "7 up to date" in proc.stdout
    # A fresh clone with an empty results dir reuses the images: sentinels only.
    proc = minibench.run("build", bench=copy, results=tmp_path / "fresh-results", check=True)
    assert built(proc) == 0 and "7 already present" in proc.stdout
    assert stamps(minibench) == before


def test_task_toml_and_instruction_edits_build_nothing(minibench):
    minibench.run("build", check=True)
    task = minibench.bench / "tasks" / "alpha"
    (task / "instruction.md").write_text("A new prompt.\n")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('version = "1.0.0"', 'version = "1.0.1"')
                    .replace("timeout_sec = 30", "timeout_sec = 40"))
    proc = minibench.run("build", check=True)
    assert built(proc) == 0


def test_judge_only_edit_rebuilds_that_judge(minibench):
    minibench.run("build", check=True)
    before = stamps(minibench)
    run_sh = minibench.bench / "tasks" / "beta" / "judge" / "run.sh"
    run_sh.write_text(run_sh.read_text() + "# tweak\n")
    plan = minibench.run("plan", check=True)
    assert "judge beta" in plan.stdout and "new hash" in plan.stdout
    assert "7 image(s): 1 to build, 0 present under their tag" in plan.stdout
    proc = minibench.run("build", check=True)
    assert built(proc) == 1
    after = stamps(minibench)
    assert changed(before, after) == {"judge/beta"}


def test_environment_edit_rebuilds_work_and_judge(minibench):
    minibench.run("build", check=True)
    before = stamps(minibench)
    readme = minibench.bench / "tasks" / "gamma" / "environment" / "README.md"
    readme.write_text("changed\n")
    proc = minibench.run("build", check=True)
    assert built(proc) == 2
    after = stamps(minibench)
    assert changed(before, after) == {"work/gamma", "judge/gamma"}


def test_base_edit_rebuilds_every_task_on_it(minibench):
    minibench.run("build", check=True)
    before = stamps(minibench)
    dockerfile = minibench.bench / "bases" / "tiny" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo v2 > /opt/tools/VERSION\n")
    proc = minibench.run("build", "-j", "2", check=True)
    assert built(proc) == 5
    after = stamps(minibench)
    assert changed(before, after) == ALL - {"work/gamma", "judge/gamma"}


def test_vanished_image_is_rebuilt(minibench, docker_client):
    minibench.run("build", check=True)
    tag = json.loads(minibench.sentinels()["work/alpha"].read_text())["tag"]
    docker_client.images.remove(tag, force=True)
    plan = minibench.run("plan", check=True)
    assert "image missing" in plan.stdout
    proc = minibench.run("build", check=True)
    assert built(proc) == 1
    docker_client.images.get(tag)


def test_verify_and_build_json(minibench, docker_client):
    """verify and build print one JSON object: what was dropped, the counts, the failures."""
    first = json.loads(minibench.run("build", "--json", check=True).stdout)
    assert (first["images"], first["built"], first["up_to_date"], first["failed"]) == \
        (7, 7, 0, [])
    tag = json.loads(minibench.sentinels()["judge/beta"].read_text())["tag"]
    docker_client.images.remove(tag, force=True)
    dropped = json.loads(minibench.run("verify", "--json", check=True).stdout)["dropped"]
    assert [p.split("/")[-2:] for p in dropped] == [["beta", tag.split(":")[1] + ".json"]]
    (minibench.bench / "tasks" / "gamma" / "judge" / "Dockerfile").write_text(
        "FROM busybox:1.36\nRUN false\n")
    proc = minibench.run("build", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["built"] == 1 and out["up_to_date"] == 5
    assert [(f["kind"], f["name"]) for f in out["failed"]] == [("judge", "gamma")]
    assert out["failed"][0]["log"].endswith(".log") and "FAILED judge gamma" in proc.stderr
    (minibench.bench / "tasks" / "gamma" / "judge" / "Dockerfile").write_text(
        "FROM busybox:1.36\nRUN <<EOT\ntrue\nEOT\n")  # refused: no build runs, no log
    refused = json.loads(minibench.run("build", "--json").stdout)["failed"]
    assert [(f["kind"], f["name"], f["log"]) for f in refused] == [("judge", "gamma", None)]


def test_force_rebuilds(minibench):
    minibench.run("build", check=True)
    proc = minibench.run("build", "--force", "--task", "gamma", check=True)
    assert built(proc) == 2


def test_work_dockerfile_cannot_copy_judge(minibench, docker_client):
    dockerfile = minibench.bench / "tasks" / "gamma" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "COPY judge/run.sh /leak.sh\n")
    proc = minibench.run("build", "--task", "gamma")
    assert proc.returncode != 0
    assert "cannot see judge/" in proc.stderr and "Dockerfile:3" in proc.stderr
    assert "work/gamma" not in minibench.sentinels()


def test_broken_task_beside_good_ones(minibench):
    toml = minibench.bench / "tasks" / "beta" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 30", 'timeout_sec = "soon"'))
    listed = minibench.run("list")
    assert listed.returncode != 0
    assert "alpha" in listed.stdout and "gamma" in listed.stdout
    assert "beta/task.toml" in listed.stderr and "judge.timeout_sec" in listed.stderr
    proc = minibench.run("build")
    assert proc.returncode != 0
    assert "beta/task.toml" in proc.stderr
    assert set(minibench.sentinels()) == ALL - {"work/beta", "judge/beta"}


def test_bad_blob_builds_nothing(minibench, tmp_path):
    served = tmp_path / "blobs"
    served.mkdir()
    good, bad = b"hidden data\n", b"tampered\n"
    sha = hashlib.sha256(good).hexdigest()
    (served / sha).write_bytes(bad)
    task = minibench.bench / "tasks" / "alpha"
    with (task / "task.toml").open("a") as fh:
        fh.write(f'\n[[blobs]]\npath = "judge/blobs/data.txt"\nsha256 = "{sha}"\n')
    with (task / "judge" / "Dockerfile").open("a") as fh:
        fh.write("COPY judge/blobs/data.txt /judge/data.txt\n")
    env = {"SFORGE_BLOB_URL": f"file://{served}"}
    proc = minibench.run("build", "--task", "alpha", env=env)
    assert proc.returncode != 0
    assert "judge/blobs/data.txt" in proc.stderr and sha in proc.stderr
    assert hashlib.sha256(bad).hexdigest() in proc.stderr
    assert not (task / "judge" / "blobs" / "data.txt").exists()
    assert "judge/alpha" not in minibench.sentinels()
    # Served correctly, the same build succeeds and the image holds the blob.
    (served / sha).write_bytes(good)
    minibench.run("build", "--task", "alpha", env=env, check=True)
    assert "judge/alpha" in minibench.sentinels()


def test_plain_snakemake_builds_the_same_targets(minibench):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "images", "--cores", "2",
         "--config", f"benchmark={minibench.bench}", f"results={minibench.results}"],
        cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(minibench.sentinels()) == ALL
    assert built(minibench.run("build", check=True)) == 0


def test_two_benchmarks_do_not_collide(tmp_path, docker_client):
    name = copy_bench(FIXTURES / "minibench", tmp_path / "other")
    try:
        sf = Sforge(tmp_path / "other", tmp_path / "res", name)
        proc = sf.run("list", "--json", check=True)
        tags = [t["work"] for t in json.loads(proc.stdout)["tasks"]]
        assert all(t.startswith(f"{name}.work.") for t in tags)
    finally:
        remove_images(docker_client, name)


def _judge_from_work(minibench, task: str = "alpha") -> None:
    """Turn `task`'s judge into one built FROM ${WORK_IMAGE}, reading a file only the work
    image has."""
    tdir = minibench.bench / "tasks" / task
    env = tdir / "environment" / "Dockerfile"
    env.write_text(env.read_text() + "RUN echo 7 > /work/answer-from-work\n")
    (tdir / "judge" / "Dockerfile").write_text(
        "ARG WORK_IMAGE\nFROM ${WORK_IMAGE}\nCOPY judge/run.sh /judge/run.sh\n"
        "RUN cp /work/answer-from-work /judge/expected\n")


def test_judge_from_work_image_waits_for_it(minibench, docker_client):
    _judge_from_work(minibench)
    plan = minibench.run("plan", "--task", "alpha", check=True)
    assert plan.stdout.index("build work ") < plan.stdout.index("build judge")
    proc = minibench.run("build", "--task", "alpha", "-j", "2", check=True)
    assert built(proc) == 3  # base, work, then the judge FROM the work image
    sentinels = minibench.sentinels()
    work = json.loads(sentinels["work/alpha"].read_text())
    judge = json.loads(sentinels["judge/alpha"].read_text())
    out = docker_client.containers.run(judge["tag"], ["cat", "/judge/expected"], remove=True)
    assert out.strip() == b"7"
    # The judge really starts from the work image: its layers are a continuation of them.
    work_layers = docker_client.images.get(work["tag"]).attrs["RootFS"]["Layers"]
    judge_layers = docker_client.images.get(judge["tag"]).attrs["RootFS"]["Layers"]
    assert judge_layers[:len(work_layers)] == work_layers
    # An environment edit invalidates both, exactly as before.
    env = minibench.bench / "tasks" / "alpha" / "environment" / "README.md"
    env.write_text("changed\n")
    before = stamps(minibench)
    assert built(minibench.run("build", "--task", "alpha", check=True)) == 2
    assert changed(before, stamps(minibench)) == {"work/alpha", "judge/alpha"}


def test_grading_prepares_the_work_image_a_judge_starts_from(minibench, tmp_path):
    _judge_from_work(minibench)
    archive = tmp_path / "sub.tar"
    with tarfile.open(archive, "w") as tar:
        data = b"7\n"
        info = tarfile.TarInfo("answer.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    proc = minibench.run("eval", "--task", "alpha", "--archive", str(archive), "--json",
                         check=True)
    assert json.loads(proc.stdout)["score"] == 7.0
    assert {"work/alpha", "judge/alpha"} <= set(minibench.sentinels())
