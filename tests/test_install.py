"""A non-editable `pip install` works from outside the checkout: the Snakefile, rules,
config.yaml and profiles travel with the package."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO, copy_bench


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
