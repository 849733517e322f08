"""sforge's CLI in a subprocess, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def sforge(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m sforge ARGS` with text output; the benchmark only from -b (the caller's
    SFORGE_BENCHMARK is cleared)."""
    return subprocess.run([sys.executable, "-m", "sforge", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "SFORGE_BENCHMARK": ""})
