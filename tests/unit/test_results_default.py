"""Where results go when nothing names a folder: `results/` beside the benchmark directory,
wherever sforge runs (in the repository: results/ at its root beside edgebench/, as
before); `--results` or a config file that sets `results` still wins."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sforge.core.config import REPO_ROOT, user_config

EXAMPLE = REPO_ROOT / "docs" / "first-task"


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("SFORGE_BENCHMARK", raising=False)
    return cwd


def test_bundled_benchmark_from_another_folder(elsewhere: Path):
    config = user_config(None, {})
    assert config["benchmark"] == str(REPO_ROOT / "edgebench")
    assert config["results"] == str(REPO_ROOT / "results")


def test_inside_the_repository_as_before(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv("SFORGE_BENCHMARK", raising=False)
    assert user_config(None, {})["results"] == str(REPO_ROOT / "results")


def test_a_benchmark_elsewhere(elsewhere: Path, tmp_path: Path):
    config = user_config(None, {"benchmark": str(tmp_path / "benches" / "mine")})
    assert config["results"] == str(tmp_path / "benches" / "results")
    config = user_config(None, {"benchmark": "mine"})  # relative: from the working directory
    assert config["results"] == str(elsewhere / "results")


def test_results_option_and_config_file_win(elsewhere: Path, tmp_path: Path):
    bench = str(tmp_path / "benches" / "mine")
    config = user_config(None, {"benchmark": bench, "results": "out"})
    assert config["results"] == str(elsewhere / "out")
    cfg = elsewhere / "my.yaml"
    cfg.write_text("results: mine-results\n")
    assert user_config(cfg, {"benchmark": bench})["results"] == str(elsewhere / "mine-results")
    cfg.write_text("docker_builds: 1\n")  # a config file that does not name results
    assert user_config(cfg, {"benchmark": bench})["results"] == str(tmp_path / "benches" /
                                                                     "results")


def test_cli_list_writes_beside_the_benchmark_not_here(elsewhere: Path, tmp_path: Path):
    bench = tmp_path / "benches" / "mybench"
    shutil.copytree(EXAMPLE, bench)
    proc = subprocess.run([sys.executable, "-m", "sforge", "-b", str(bench), "plan"],
                          capture_output=True, text=True, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert not (elsewhere / "results").exists()
    assert (tmp_path / "benches" / "results" / "mybench").is_dir()
    helptext = subprocess.run([sys.executable, "-m", "sforge", "--help"], capture_output=True,
                              text=True).stdout
    assert "beside the benchmark" in " ".join(helptext.split())
