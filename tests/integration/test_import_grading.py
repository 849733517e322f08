"""Tasks made by `sforge import` from both formats grade their references at 100 and an empty
workspace at 0 on real images."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from tests.helpers import paths
from tests.helpers.benches import remove_images
from tests.helpers.imports import FITS

FIXTURES = paths.FIXTURES / "import"


def sforge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sforge", *args], capture_output=True,
                          text=True, cwd=cwd)


@pytest.mark.docker
def test_imported_tasks_grade_reference_100_and_empty_0(tmp_path: Path, docker_client) -> None:
    """Import both formats with their references (run in the work images), then the
    benchmark's report shows each reference at 100, and an empty workspace scores 0; the
    shared-acl task's answer is a group, mode 2770 and a default ACL."""
    name = f"imp{uuid.uuid4().hex[:8]}"
    into, results = tmp_path / name, tmp_path / "results"
    try:
        for fmt in ("harbor", "terminal-bench"):
            proc = sforge("--results", str(results), "import", fmt, str(FIXTURES / fmt),
                          "--into", str(into), "--json", "-j", "2", cwd=tmp_path)
            assert proc.returncode == 1, proc.stderr  # one task of each does not fit
            tasks = {t["task"]: t for t in json.loads(proc.stdout)["tasks"]}
            for tid, task in tasks.items():
                if tid in FITS:
                    assert task["reference"] and not task["reference_problem"], task
        with tarfile.open(into / "submissions" / "reference" / "shared-acl" /
                          "reference.tar.gz") as tar:
            shared = tar.getmember("shared")  # packed as sforge-submit packs: no "./"
        assert (shared.mode, shared.gid) == (0o2770, 2345)
        # packed with its ACL as the raw xattr too (numeric ids, unlike GNU tar's ACL text)
        assert "SCHILY.xattr.system.posix_acl_default" in shared.pax_headers
        proc = sforge("-b", str(into), "--results", str(results), "report", "-j", "2",
                      cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = list(csv.DictReader((results / name / "scores.csv").open()))
        assert {(r["task"], r["source"], float(r["rescaled"])) for r in rows} == {
            (t, "reference", 100.0) for t in FITS}
        empty = tmp_path / "empty.tar"
        with tarfile.open(empty, "w") as tar:
            tar.addfile(tarfile.TarInfo("."), io.BytesIO())
        for tid in FITS:
            proc = sforge("-b", str(into), "--results", str(results), "eval", "--task", tid,
                          "--archive", str(empty), "--json", cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr[-3000:]
            view = json.loads(proc.stdout)
            assert (view["valid"], view["score"], view["rescaled"]) == (True, 0.0, 0.0), view
    finally:
        remove_images(docker_client, name)
        shutil.rmtree(into, ignore_errors=True)
