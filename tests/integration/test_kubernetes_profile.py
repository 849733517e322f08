"""profiles/kubernetes: checked without a cluster.

Snakemake parses the profile, builds the executor plugin's settings from it (an unknown
key is an error) and plans the DAG in a dry run; no kube config is needed for that. The
plugins live in a separate environment layered on the project's (the kubernetes client
would add ~0.75 s to every Snakemake start in .venv): $SFORGE_K8S_PYTHON, else this
interpreter when it has them, else a venv made once under ~/.cache/sforge/, downloaded from
PyPI only when asked (SFORGE_K8S_INSTALL=1, as .ci/run does); otherwise skipped, saying so.
Marked `k8s`: `pytest -m "not k8s"` leaves them out. SFORGE_SKIP_K8S=1 skips them too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import FIXTURES, REPO

pytestmark = pytest.mark.k8s

PROFILE = REPO / "profiles" / "kubernetes"
PINS = ["snakemake-executor-plugin-kubernetes>=0.5,<0.6", "snakemake-storage-plugin-fs>=1.1,<2"]
CHECK = "import snakemake_executor_plugin_kubernetes, snakemake_storage_plugin_fs"


def _has_plugins(python: str | Path) -> bool:
    return subprocess.run([str(python), "-c", CHECK], capture_output=True).returncode == 0


def _layered_venv() -> Path:
    """A venv that sees the project's site-packages (through a .pth) plus the plugins."""
    key = hashlib.sha256(f"{sys.version}{PINS}{sys.prefix}".encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sforge"
    venv = cache / f"k8s-venv-{key}"
    python = venv / "bin" / "python"
    if python.exists() and _has_plugins(python):
        return python
    if os.environ.get("SFORGE_K8S_INSTALL") != "1":
        pytest.skip(f"the Kubernetes plugins ({', '.join(PINS)}) are not installed; set "
                    "SFORGE_K8S_INSTALL=1 to fetch them from PyPI into "
                    f"{venv}, or SFORGE_K8S_PYTHON to an interpreter that has them")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="k8s-venv.", dir=cache))
    try:
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(tmp)], check=True, capture_output=True)
        site = Path(subprocess.run(
            [str(tmp / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
             "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
        (site / "sforge-project.pth").write_text(
            f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
        pip = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", *PINS],
                             capture_output=True, text=True, timeout=600)
        if pip.returncode != 0:
            pytest.skip(f"cannot install {PINS} (offline?): {pip.stderr[-500:]}")
        shutil.rmtree(venv, ignore_errors=True)
        tmp.rename(venv)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return python


@pytest.fixture(scope="session")
def k8s_python() -> str:
    if os.environ.get("SFORGE_SKIP_K8S") == "1":
        pytest.skip("SFORGE_SKIP_K8S=1")
    for candidate in (os.environ.get("SFORGE_K8S_PYTHON"), sys.executable):
        if candidate and _has_plugins(candidate):
            return candidate
    return str(_layered_venv())


def dry_run(python: str, profile: Path, tmp: Path, n: int) -> subprocess.CompletedProcess:
    bench = tmp / "bench"
    if not bench.exists():
        shutil.copytree(FIXTURES / "minibench", bench)
        tasks = sorted(p.name for p in (bench / "tasks").iterdir())
        for i in range(n):
            folder = bench / "submissions" / "agent" / tasks[i % len(tasks)]
            folder.mkdir(parents=True, exist_ok=True)
            # content does not matter to planning; the file name and hash do
            (folder / f"s{i}.tar.gz").write_bytes(f"archive {i}".encode())
    home = tmp / "home"  # no ~/.kube/config: planning must not need a cluster
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run(
        [python, "-m", "snakemake", "grade", "--profile", str(profile), "--dry-run",
         "--directory", str(tmp / "results"), "--config", f"benchmark={bench}",
         f"results={tmp / 'results'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**env, "HOME": str(home)})


def test_dry_run_plans_with_the_profile(k8s_python, tmp_path):
    proc = dry_run(k8s_python, PROFILE, tmp_path, 8)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "This was a dry-run" in text
    assert text.count("rule evaluate:") == 8
    assert "Group job judge" in text
    assert "(send to storage)" in text  # no shared FS: outputs go through the fs provider


def test_unknown_key_is_refused(k8s_python, tmp_path):
    profile = tmp_path / "profile"
    profile.mkdir()
    text = (PROFILE / "config.yaml").read_text()
    (profile / "config.yaml").write_text(text + "kubernetes-namspace: typo\n")
    proc = dry_run(k8s_python, profile, tmp_path, 2)
    assert proc.returncode != 0
    assert "unrecognized arguments: --kubernetes-namspace" in proc.stderr


def test_plugin_keys_are_fields_of_its_settings(k8s_python):
    fields = json.loads(subprocess.run(
        [k8s_python, "-c", "import dataclasses, json, snakemake_executor_plugin_kubernetes as k;"
         " print(json.dumps([f.name for f in dataclasses.fields(k.ExecutorSettings)]))"],
        check=True, capture_output=True, text=True).stdout)
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    used = [k.removeprefix("kubernetes-").replace("-", "_") for k in profile
            if k.startswith("kubernetes-")]
    assert used and set(used) <= set(fields), (used, fields)
    assert profile["executor"] == "kubernetes"
