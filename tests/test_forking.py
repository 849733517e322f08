"""sforge.forking: work shared out to forked workers comes back in order, and a worker that
dies is an error, never a wait without end."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from sforge import forking
from sforge.errors import SforgeError

pytestmark = pytest.mark.skipif(forking.usable_cores() < 2, reason="needs two cores")


@pytest.fixture(autouse=True)
def no_other_threads(monkeypatch):  # type: ignore[no-untyped-def]
    # Earlier tests of this pytest process leave idle threads behind (fork_map stays serial).
    monkeypatch.setattr(forking, "threading", SimpleNamespace(active_count=lambda: 1))


def test_answers_in_order_from_workers():
    parent = os.getpid()
    got = forking.fork_map(lambda i: (i * i, os.getpid()), list(range(20)), 1)
    assert [a for a, _ in got] == [i * i for i in range(20)]
    assert {pid for _, pid in got} - {parent}


def test_an_exception_in_a_worker_is_raised_here():
    def one(i: int) -> int:
        if i == 5:
            raise SforgeError("item 5 is broken")
        return i

    with pytest.raises(SforgeError, match="item 5 is broken"):
        forking.fork_map(one, list(range(10)), 1)


def test_a_killed_worker_is_an_error_not_a_hang():
    def one(i: int) -> int:
        if i == 3:
            os.kill(os.getpid(), 9)
        return i

    with pytest.raises(SforgeError, match="worker process died"):
        forking.fork_map(one, list(range(8)), 1)
