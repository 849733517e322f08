"""The workflow passes `snakemake --lint` (every rule has a `log:`, no functions mixed into
rule files), as a CI that lints workflows would run it."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.paths import REPO


def test_snakemake_lint_is_clean(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--snakefile", str(REPO / "Snakefile"),
         "--directory", str(tmp_path), "--config", f"benchmark={REPO / 'edgebench'}",
         f"results={tmp_path}"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Lints for" not in out and "good condition" in out, out
