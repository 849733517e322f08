"""A broken agent run says it is broken: a model API that fails every call stops the run
early as `failed` with the API's status and message (not a run that burns its timeout and
ends `done` with best 0); a run without the key is refused; a good run shows its tokens and
cost. The real claude-code CLI against scripted servers on loopback: no real model API."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from sforge.runs.model_health import ModelHealth
from sforge.runs.proxy import HostSockets, ModelRoute
from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.model_server import INPUT_TOKENS, OUTPUT_TOKENS, ScriptedModel
from tests.helpers.paths import REPO

KEY = "sk-ant-test-" + "b40c3e" * 4
TASK = "semver_ranges"
MESSAGES = {401: ("authentication_error", "invalid x-api-key"),
            429: ("rate_limit_error", "slow down"),
            500: ("api_error", "Internal server error")}


class FailingModel(ScriptedModel):
    """A Messages-API server that answers every call with one HTTP error, as Anthropic does;
    with status None, the scripted model of its commands."""

    def __init__(self, status: int | None, retry_after: str | None = None,
                 commands: list[str] | None = None):
        super().__init__(commands=commands or [])
        self.status, self.retry_after = status, retry_after

    async def _fail(self, request):
        from aiohttp import web

        if self.status is None:
            return await ScriptedModel.messages(self, request)
        self.requests.append({"path": request.path_qs, "at": time.monotonic()})
        kind, message = MESSAGES[self.status]
        headers = {"Retry-After": self.retry_after} if self.retry_after else None
        return web.json_response({"type": "error", "error": {"type": kind, "message": message}},
                                 status=self.status, headers=headers)

    messages = responses = other = _fail


# the proxy's count, no container -------------------------------------------------------------
class Client:
    """Blocking Messages-API calls over the proxy's Unix socket, as the container's relay."""

    def __init__(self, sock):
        self.sock = str(sock)

    def ask(self) -> int:
        import asyncio

        import aiohttp

        async def go() -> int:
            conn = aiohttp.UnixConnector(path=self.sock)
            async with aiohttp.ClientSession(connector=conn) as session, session.post(
                    "http://model/v1/messages", headers={"x-api-key": "placeholder"},
                    json={"model": "m", "max_tokens": 10, "stream": False,
                          "messages": [{"role": "user", "content": "go"}]}) as resp:
                await resp.read()
                return resp.status
        return asyncio.run(go())


def _proxy(tmp_path, upstream: str, fail_after: int):
    failures: list[str] = []
    route = ModelRoute(upstream=upstream, key=KEY, key_header="x-api-key",
                       health=ModelHealth(upstream, fail_after), on_fail=failures.append)
    host = HostSockets(tmp_path, None, route)
    host.start()
    return host, route, Client(tmp_path / "model.sock"), failures


@pytest.mark.parametrize("status", [401, 500])
def test_proxy_reports_a_failing_api_once_at_the_threshold(tmp_path, status):
    server = FailingModel(status).start()
    host, route, client, failures = _proxy(tmp_path, server.url, 3)
    try:
        seen = []
        for call in range(1, 5):
            status_seen = client.ask()
            # the proxy tells the run once the reply has gone out: wait a moment for it
            deadline = time.monotonic() + 5
            while call >= 3 and not failures and time.monotonic() < deadline:
                time.sleep(0.02)
            seen.append((status_seen, list(failures)))
    finally:
        host.stop()
        server.stop()
    # the agent still sees the API's own reply; the run is told once, at the third call
    assert [s for s, _ in seen] == [status] * 4
    assert [len(f) for _, f in seen] == [0, 0, 1, 1]
    kind, message = MESSAGES[status]
    assert f"HTTP {status} {kind}: {message}" in failures[0]
    assert server.url in failures[0] and "3 model calls in a row failed" in failures[0]
    assert route.health is not None and route.health.verdict() is not None


def test_rate_limits_and_a_working_api_never_stop_a_run(tmp_path):
    limited = FailingModel(429, retry_after="1").start()
    host, route, client, failures = _proxy(tmp_path, limited.url, 2)
    try:
        codes = [client.ask() for _ in range(4)]
    finally:
        host.stop()
        limited.stop()
    assert codes == [429] * 4 and failures == []
    # …but a run that got nothing else has failed, when it ends
    assert route.health is not None and "HTTP 429 rate_limit_error" in route.health.verdict()

    good = ScriptedModel(commands=["echo hi"]).start()
    (tmp_path / "g").mkdir()
    host, route, client, failures = _proxy(tmp_path / "g", good.url, 2)
    try:
        assert client.ask() == 200
    finally:
        host.stop()
        good.stop()
    # once the API answered, later errors are the agent's to retry
    assert route.health is not None
    for _ in range(5):
        assert route.health.record(500, {"error": "down"}, {}, None) is None
    assert route.health.verdict() is None and failures == []


def test_an_unreachable_api_counts_as_failing(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    host, _, client, failures = _proxy(tmp_path, url, 2)
    try:
        codes = [client.ask() for _ in range(2)]
    finally:
        host.stop()
    assert codes == [502, 502] and "HTTP 502" in failures[0] and "failed" in failures[0]


# the real claude-code CLI in a work container -----------------------------------------------------
@pytest.fixture(scope="module")
def edge(tmp_path_factory, docker_client):
    root = tmp_path_factory.mktemp("broken")
    name = copy_bench(REPO / "edgebench", root / "bench")
    for other in ("knapsack", "log_triage", "text_compression", "number_guess"):
        shutil.rmtree(root / "bench" / "tasks" / other, ignore_errors=True)
    shutil.rmtree(root / "bench" / "submissions")
    yield Sforge(root / "bench", root / "results", name)
    remove_images(docker_client, name)


def _folder(edge, run_id: str):
    return edge.results / edge.name / "runs" / run_id / TASK / "0"


def _listed(edge, run_id: str) -> dict:
    proc = edge.run("runs", "--run", run_id, "--json", check=True)
    rows = json.loads(proc.stdout)["runs"]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.docker
@pytest.mark.parametrize("status", [401, 500])
def test_claude_code_against_a_failing_api_fails_early(edge, status):
    timeout = 600
    server = FailingModel(status).start()
    run_id = f"broken{status}"
    started = time.monotonic()
    try:
        proc = edge.run("run", "--agent", "claude-code", "--task", TASK, "--run-id", run_id,
                        "--timeout", str(timeout), "--model-api", server.url,
                        env={"ANTHROPIC_API_KEY": KEY})
    finally:
        server.stop()
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert server.requests, out  # the real CLI did call the API
    assert took < timeout / 4, (took, out)
    kind, message = MESSAGES[status]
    folder = _folder(edge, run_id)
    assert not (folder / "run.json").exists()  # the same command runs it again later
    rec = json.loads((folder / "attempt-1.json").read_text())
    assert rec["state"] == "failed", rec
    assert f"HTTP {status} {kind}: {message}" in rec["error"] and server.url in rec["error"]
    assert rec["final"] is None and rec["rounds"] == 0  # nothing graded for a broken run
    assert rec["model_calls"]["succeeded"] == 0
    assert rec["model_calls"]["failed"] == len(server.requests)
    assert f"run failed: {rec['error']}" in (folder / "agent.log").read_text()
    row = _listed(edge, run_id)
    assert row["state"] == "failed" and f"HTTP {status}" in row["error"]
    # the table `sforge run` printed at its end says so too
    assert "failed" in proc.stdout and f"HTTP {status}" in proc.stdout
    # one line of sforge's says why, with no Python frames or Snakemake internals
    line = f"{TASK}  {run_id}/0  FAILED: model API {server.url}"
    assert line in proc.stderr and f"HTTP {status} {kind}" in proc.stderr, proc.stderr
    for internal in ("RuleException", "File \"", "Traceback", "Exiting because",
                     "--keep-incomplete", "did not complete successfully"):
        assert internal not in out, out


@pytest.mark.docker
def test_no_key_is_refused_and_a_bad_model_api_too(edge):
    proc = edge.run("run", "--agent", "claude-code", "--task", TASK, "--run-id", "nokey",
                    env={"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "ANTHROPIC_API_KEY is not set" in proc.stderr and "--model-api" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (edge.results / edge.name / "runs" / "nokey").exists()
    proc = edge.run("run", "--agent", "claude-code", "--task", TASK, "--run-id", "badapi",
                    "--model-api", "http://user:pw@127.0.0.1:9/x?y=1",
                    env={"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 3 and "--model-api" in proc.stderr, proc.stderr


@pytest.mark.docker
def test_good_run_with_another_api_and_no_key_is_done_with_tokens(edge):
    """--model-api with no key set: the proxy forwards without one; the run ends done and
    `sforge runs` shows its tokens and cost (claude-sonnet-4-5 has a price)."""
    model = ScriptedModel(commands=[
        "printf 'print(1)\\n' > semver.py && sforge-submit; echo SUBMITTED"]).start()
    try:
        proc = edge.run("run", "--agent", "claude-code", "--task", TASK, "--run-id", "good",
                        "--timeout", "300", "--max-resumes", "0", "--model-api", model.url,
                        env={"ANTHROPIC_API_KEY": ""})
    finally:
        model.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r["x-api-key"] for r in model.requests} == {None}  # no key, not a placeholder
    calls = len([r for r in model.requests if r["path"].startswith("/v1/messages")])
    rec = json.loads((_folder(edge, "good") / "run.json").read_text())
    assert rec["state"] == "done" and rec["error"] is None and rec["rounds"] == 2
    row = _listed(edge, "good")
    assert row["state"] == "done" and row["error"] is None and row["rounds"] == 2
    assert row["tokens_in"] == INPUT_TOKENS * calls and row["tokens_out"] == OUTPUT_TOKENS * calls
    assert row["cost_usd"] == pytest.approx((3.0 * row["tokens_in"]
                                             + 15.0 * row["tokens_out"]) / 1e6)
    table = edge.run("runs", "--run", "good", check=True).stdout
    assert "tokens_in" in table and "cost_usd" in table and str(row["tokens_in"]) in table


def test_model_api_urls_and_a_gateway_path_prefix(tmp_path):
    from sforge.core.errors import SforgeError
    from sforge.runs.origin import check_api_url

    assert check_api_url("https://gw.example.com:8443/anthropic/") == \
        "https://gw.example.com:8443/anthropic"
    for bad in ("ftp://h", "http://user:pw@h", "http://h/x?key=1", "http://h/#f", "h:80",
                "http://h:99999"):
        with pytest.raises(SforgeError, match="--model-api"):
            check_api_url(bad)
    # the proxy forwards under the prefix, to that origin only
    server = FailingModel(500).start()
    host, _, client, _ = _proxy(tmp_path, server.url + "/gw", 5)
    try:
        assert client.ask() == 500
    finally:
        host.stop()
        server.stop()
    assert [r["path"] for r in server.requests] == ["/gw/v1/messages"]


@pytest.mark.docker
def test_a_failed_run_starts_afresh_once_the_api_answers(edge):
    """The same command, the key fixed (here: the server healed), makes the run."""
    server = FailingModel(401, commands=[
        "printf 'print(1)\\n' > semver.py && sforge-submit; echo SUBMITTED"]).start()
    args = ["run", "--agent", "claude-code", "--task", TASK, "--run-id", "healed",
            "--timeout", "300", "--max-resumes", "0", "--model-api", server.url]
    try:
        first = edge.run(*args, env={"ANTHROPIC_API_KEY": KEY})
        server.status = None
        second = edge.run(*args, env={"ANTHROPIC_API_KEY": KEY})
    finally:
        server.stop()
    assert first.returncode == 1, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    rec = json.loads((_folder(edge, "healed") / "run.json").read_text())
    assert rec["attempt"] == 2 and rec["state"] == "done" and rec["rounds"] == 2
    assert rec["model_calls"]["failed"] == 0 and rec["model_calls"]["succeeded"] >= 2
    row = _listed(edge, "healed")
    assert row["state"] == "done" and row["attempts"] == 2 and row["error"] is None


def test_the_apis_own_words_in_the_error():
    from sforge.runs.model_health import upstream_message

    openai = {"error": {"message": "Incorrect API key provided: sk-…", "type":
                        "invalid_request_error", "code": "invalid_api_key"}}
    assert upstream_message(openai) == "invalid_request_error: Incorrect API key provided: sk-…"
    assert upstream_message({"error": "no such model"}) == "no such model"
    assert upstream_message("<html>502 Bad Gateway</html>\n") == "<html>502 Bad Gateway</html>"
    stream = [{"type": "ping"}, {"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "Overloaded"}}]
    assert upstream_message(stream) == "overloaded_error: Overloaded"
    assert upstream_message("x" * 1000).endswith("…") and len(upstream_message("x" * 1000)) < 400
    health = ModelHealth("http://api", fail_after=2)
    assert health.record(404, {"error": "not found"}, {}, None) is None
    assert health.record(503, "down", {"Retry-After": "5"}, None) is None  # throttled: waits
    reason = health.record(401, openai, {}, None)
    assert reason and "2 model calls in a row" in reason and "HTTP 401 invalid_request_error" \
        in reason
    assert health.record(401, openai, {}, None) is None  # told once
    assert health.as_dict() == {"succeeded": 0, "failed": 4, "last_error": health.last}
