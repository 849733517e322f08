"""Integration: a hostile or careless agent abusing the game step protocol through the
real service (a fixture game whose replies can be slow, real game containers)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from sforge.service.client import ServiceClient, ServiceError
from sforge.service.launch import start_service
from tests.helpers.benches import copy_bench, remove_images
from tests.helpers.paths import FIXTURES

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def svc(tmp_path_factory, docker_client):
    root = tmp_path_factory.mktemp("gameabuse")
    name = copy_bench(FIXTURES / "gamebench", root / "bench")
    handle = start_service(root / "bench", root / "results", port=0)
    yield handle
    try:
        assert handle.stop() == 0, handle.log.read_text()[-3000:]
    finally:
        remove_images(docker_client, name)


def session(svc) -> tuple[ServiceClient, str, str]:
    _, token = svc.client().register_run("slow", f"g{uuid.uuid4().hex[:8]}")
    client = ServiceClient(svc.url, token, retry_503=False)
    return client, token, client.new_game()["id"]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_huge_step_is_refused_before_it_is_read(svc):
    """A step body far over `max_step_bytes` (64 KiB) is refused with 413 without the
    service ever holding it: with and without a Content-Length."""
    client, token, sid = session(svc)
    url = f"{svc.url}/v1/games/{sid}/step"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    chunk = b"9" * (1 << 20)
    before = peak_rss_mb(svc.process.pid)
    for length in (True, False):
        def body():
            yield b'{"guess": "'
            for _ in range(400):
                yield chunk
            yield b'"}'
        extra = {"Content-Length": str(400 * len(chunk) + 13)} if length else {}
        try:
            resp = httpx.post(url, content=body(), headers={**headers, **extra}, timeout=60)
        except httpx.TransportError:
            pass  # the service answered 413 and closed while we were still sending
        else:
            assert resp.status_code == 413, resp.text
            assert "64" in resp.json()["error"] or "65536" in resp.json()["error"]
    grown = peak_rss_mb(svc.process.pid) - before
    assert grown < 100, f"the service's peak memory grew by {grown:.0f} MB"
    assert client.step(sid, {"n": 1})["step"] == 1  # the session is unharmed
    client.close_game(sid)


def test_steps_piled_on_one_in_flight_are_refused_at_once(svc, docker_client):
    """While one step waits for a slow game, more steps of the same session get 409 at
    once instead of each holding a service thread until the first is done (forty of them
    would stall every other run's calls); the service keeps answering meanwhile."""
    client, token, sid = session(svc)
    done: dict[str, float] = {}

    def slow() -> None:
        client.step(sid, {"slow": True})
        done["slow"] = time.monotonic()

    first = threading.Thread(target=slow)
    first.start()
    box = docker_client.containers.list(filters={"label": f"sforge.game.session={sid}"})[0]
    deadline = time.monotonic() + 30
    while not any("sleep" in " ".join(p) for p in box.top()["Processes"]):
        assert time.monotonic() < deadline, "the slow step never reached the game"
        time.sleep(0.05)  # until the game is busy with the slow step
    answers: list[int] = []
    ended: list[float] = []
    other = ServiceClient(svc.url, token, retry_503=False)

    def pile() -> None:
        try:
            other.step(sid, {"n": 2})
            answers.append(200)
        except ServiceError as exc:
            answers.append(exc.status)
        ended.append(time.monotonic())

    threads = [threading.Thread(target=pile) for _ in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    metrics = svc.client().metrics()  # another caller is served meanwhile
    metrics_at = time.monotonic()
    first.join(60)
    assert answers == [409] * 48, answers
    assert max(ended) < done["slow"] and metrics_at < done["slow"]
    assert metrics["queued"] == 0
    assert client.step(sid, {"n": 3})["step"] == 2  # the session goes on
    client.close_game(sid)


def test_a_request_with_unicode_line_separators_keeps_the_transcript_readable(svc):
    """JSON allows U+2028/U+2029 raw inside strings; the transcript is JSON lines split
    at newlines only, so reading it back gives every step, the request as sent."""
    client, _, sid = session(svc)
    request = {"n": "a\u2028b\u2029c\x85d"}
    client.step_raw(sid, json.dumps(request, ensure_ascii=False).encode())
    client.close_game(sid)
    steps = client.transcript(sid)
    assert len(steps) == 2 and steps[1]["request"] == request
