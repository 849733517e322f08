"""A non-editable `pip install` works from outside the checkout: the Snakefile, rules,
config.yaml, profiles, agent definitions and the helper's sources travel with the package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers.benches import copy_bench, remove_images
from tests.helpers.paths import FIXTURES, REPO


@pytest.mark.docker
def test_non_editable_install_runs_from_elsewhere(tmp_path, docker_client):
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--target", str(target), str(REPO)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-3000:]
    assert not (target / "sforge" / "workflow_files").is_symlink()
    assert (target / "sforge" / "workflow_files" / "rules" / "images.smk").is_file()
    name = copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}

    def sforge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sforge", "-b", str(tmp_path / "bench"),
                               "--results", "results", *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True)

    where = subprocess.run([sys.executable, "-c", "import sforge; print(sforge.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    assert where.stdout.startswith(str(target)), where.stdout
    plan = sforge("plan")
    assert plan.returncode == 0 and "7 image(s): 7 to build" in plan.stdout, plan.stderr
    # `report` runs the installed Snakefile in-process (tables of an empty benchmark)
    report = sforge("report")
    assert report.returncode == 0, report.stderr[-3000:]
    assert (elsewhere / "results" / name / "report.html").is_file()


@pytest.mark.docker
def test_wheel_in_a_fresh_venv_lists_agents_and_makes_a_script_run(tmp_path, docker_client):
    """A wheel installed into a fresh venv outside the checkout carries the agent definitions
    and the helper's Go sources: `sforge agents` lists the shipped agents, and a script-agent
    run builds the helper from the installed sources, submits, and is graded."""
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "-w", str(dist), str(REPO)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(dist.glob("sforge-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the dependencies (and pip) from this interpreter's site-packages, listed after the
    # venv's own: a plain path line, so that site-packages' own .pth files (the checkout's
    # editable sforge) are not read
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True)
    Path(purelib.stdout.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SFORGE_HELPER")}
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                          str(wheel)], capture_output=True, text=True, env=env)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(py), "-c", "import sforge; print(sforge.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv), where.stdout + where.stderr

    def sforge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "sforge"), *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=240)

    agents = sforge("agents")
    assert agents.returncode == 0, agents.stderr[-3000:]
    listed = {line.split()[0] for line in agents.stdout.splitlines() if line.strip()}
    assert {"claude-code", "codex", "script"} <= listed, agents.stdout
    # shell completion from the installed wheel: sourced by bash, it completes a command
    completion = sforge("completion", "bash")
    assert completion.returncode == 0, completion.stderr
    probe = subprocess.run(
        ["bash", "-c", 'source /dev/stdin; COMP_WORDS=(sforge ev); COMP_CWORD=1; '
                       '_shtab_sforge sforge ev sforge; echo "${COMPREPLY[*]}"'],
        input=completion.stdout, capture_output=True, text=True)
    assert probe.stdout.split() == ["eval"], probe.stdout + probe.stderr

    name = copy_bench(FIXTURES / "servicebench", tmp_path / "bench")
    script = tmp_path / "a.sh"
    script.write_text("echo 6 > answer.txt; sforge-submit\n")
    try:
        run = sforge("-b", str(tmp_path / "bench"), "--results", "results", "run",
                     "--agent", "script", "--script", str(script), "--task", "quick",
                     "--run-id", "wheel", "--timeout", "60")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    finally:
        remove_images(docker_client, name)
    rec = json.loads((elsewhere / "results" / name / "runs" / "wheel" / "quick" / "0" /
                      "run.json").read_text())
    assert rec["best_score"] == 6 and rec["final"]["final"], rec
    # the helper was built from the sources the wheel carries
    assert any(package.rglob("sforge-helper")), sorted(package.rglob("*helper*"))


def test_helper_of_a_read_only_install_is_built_into_the_user_cache(tmp_path, monkeypatch):
    """Where the package's helper sources cannot be written to, the helper is built into the
    user's cache under a digest of those sources, and found there the next time."""
    from sforge.runs import helper

    if shutil.which("go") is None:
        pytest.skip("Go is missing (scripts/setup.sh installs golang-go)")
    source = tmp_path / "site" / "helper"
    shutil.copytree(REPO / "helper", source, ignore=shutil.ignore_patterns("build"))
    monkeypatch.setattr(helper, "SOURCE", source)
    access = os.access
    monkeypatch.setattr(helper.os, "access",
                        lambda path, mode: mode != os.W_OK and access(path, mode))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(helper.ENV, raising=False)
    built = helper.helper_binary()
    assert built.is_file() and built.is_relative_to(tmp_path / "cache" / "sforge")
    assert not (source / "build").exists()
    assert helper.helper_binary() == built and built.stat().st_mtime_ns == \
        helper.helper_binary().stat().st_mtime_ns
