"""Fixtures for the whole suite. Helpers are imported as `tests.helpers.<module>`; the
fixtures that need Docker, a registry or SLURM are in integration/conftest.py."""

from __future__ import annotations

import signal

import pytest

from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import Benchmark
from tests.helpers.paths import FIXTURES

# Fixtures are data, not this suite's tests (the tasks written for `sforge import` carry
# their own pytest files).
collect_ignore = ["fixtures"]

# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits
# SIGINT ignored, and so would every sforge it starts: the Ctrl-C tests need what a
# terminal gives. A handler here makes the commands it starts get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    """The fixture benchmark fixtures/scores_bench (five tasks, no Docker), loaded."""
    b = load_benchmark(FIXTURES / "scores_bench")
    assert not b.errors and len(b.tasks) == 5
    return b
