"""The helper binary is built once per source state, safely when several builders race: the
threads of one `sforge run -j N` (one process id) or processes on several nodes sharing a
results or cache folder."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sforge.runs.helper import build_helper


@pytest.mark.skipif(shutil.which("go") is None, reason="Go missing (scripts/setup.sh installs it)")
def test_builders_racing_in_one_process_each_get_a_whole_binary(tmp_path: Path) -> None:
    out = tmp_path / "sforge-helper"
    with ThreadPoolExecutor(4) as pool:
        built = list(pool.map(lambda _: build_helper(out), range(4)))
    assert built == [out] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sforge-helper"]  # no leftovers
    proc = subprocess.run([str(out)], capture_output=True, text=True)  # it runs
    assert proc.stderr.startswith("sforge-submit: SFORGE_SERVICE is not set"), proc.stderr
