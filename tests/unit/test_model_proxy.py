"""The model proxy on the host: forwards only to the declared API, adds the key there,
records usage and the transcript, stops at a cap. A real proxy on a real Unix socket in
front of a scripted Messages-API server."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import aiohttp
import pytest

from sforge.runs.proxy import HostSockets, ModelRoute, parse_usage, reply_models
from tests.helpers.model_server import INPUT_TOKENS, OUTPUT_TOKENS, ScriptedModel
from tests.helpers.servers import RawServer

KEY = "sk-ant-test-SECRET-0123456789"


@pytest.fixture
def model():
    server = ScriptedModel(commands=["echo hi"]).start()
    yield server
    server.stop()


def _proxy(tmp_path, model, **kw):
    caps: list[str] = []
    route = ModelRoute(upstream=model.url, key=KEY, key_header="x-api-key",
                       transcript=tmp_path / "transcript.jsonl", on_cap=caps.append,
                       price={"input": 3.0, "output": 15.0}, **kw)
    sock_dir = tmp_path / "s"
    sock_dir.mkdir()
    host = HostSockets(sock_dir, None, route)
    host.start()
    return host, route, _Client(sock_dir / "model.sock"), caps


class _Client:
    """A few blocking HTTP calls over a Unix socket (the container's relay does the same)."""

    def __init__(self, sock):
        self.sock = str(sock)

    def request(self, method, path, headers=None, json=None):
        async def go():
            conn = aiohttp.UnixConnector(path=self.sock)
            async with aiohttp.ClientSession(connector=conn) as session, \
                    session.request(method, f"http://model{path}", headers=headers,
                                    json=json) as resp:
                text = await resp.text()
                return SimpleNamespace(status_code=resp.status, text=text,
                                       json=lambda: __import__("json").loads(text))
        return asyncio.run(go())

    def post(self, path, headers=None, json=None):
        return self.request("POST", path, headers, json)

    def get(self, path, headers=None):
        return self.request("GET", path, headers)


def _ask(client, stream=True):
    return client.post("/v1/messages?beta=true", headers={"x-api-key": "sforge-placeholder-key"},
                       json={"model": "m", "max_tokens": 100, "stream": stream,
                             "tools": [{"name": "Bash"}],
                             "messages": [{"role": "user", "content": "go"}]})


def test_key_added_on_the_host_usage_and_transcript(tmp_path, model):
    host, route, client, caps = _proxy(tmp_path, model)
    try:
        streamed = _ask(client)
        plain = _ask(client, stream=False)
    finally:
        host.stop()
    assert streamed.status_code == 200 and "tool_use" in streamed.text
    assert plain.json()["content"][0]["name"] == "Bash"
    # the upstream saw the real key, never the placeholder
    assert [r["x-api-key"] for r in model.requests] == [KEY, KEY]
    assert route.usage.calls == 2
    assert route.usage.input_tokens == 2 * INPUT_TOKENS
    assert route.usage.output_tokens == 2 * OUTPUT_TOKENS
    assert route.usage.cost_usd == pytest.approx((200 * 3.0 + 40 * 15.0) / 1e6)
    lines = [json.loads(x) for x in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert [x["usage"]["output_tokens"] for x in lines] == [OUTPUT_TOKENS, OUTPUT_TOKENS]
    assert lines[0]["request"]["messages"][0]["content"] == "go"
    assert any(e.get("type") == "message_delta" for e in lines[0]["response"])
    assert KEY not in (tmp_path / "transcript.jsonl").read_text()
    assert not caps
    assert route.api_models == ["m"]  # as the replies named it (streamed and plain)


def test_the_model_is_taken_from_the_replies_not_the_request():
    anthropic_stream = [{"type": "message_start",
                         "message": {"model": "claude-sonnet-4-5-20250929", "usage": {}}},
                        {"type": "message_delta", "usage": {"output_tokens": 3}}]
    openai_stream = [{"type": "response.created", "response": {"model": "gpt-5-codex-0925"}},
                     {"type": "response.completed", "response": {"model": "gpt-5-codex-0925"}}]
    assert reply_models(anthropic_stream) == ["claude-sonnet-4-5-20250929"]
    assert reply_models(openai_stream) == ["gpt-5-codex-0925"]
    assert reply_models([{"model": "qwen3-coder"}, "text", None]) == ["qwen3-coder"]
    route = ModelRoute(upstream="http://x", key=None, key_header="x-api-key")
    route.add({}, ["a"])
    route.add({}, ["a", "b"])
    assert route.api_models == ["a", "b"] and route.usage.calls == 2


def test_cap_stops_the_run_and_refuses_further_calls(tmp_path, model):
    host, route, client, caps = _proxy(tmp_path, model, max_tokens=150)
    try:
        assert _ask(client).status_code == 200       # 120 tokens
        assert _ask(client).status_code == 200       # 240: over the cap
        refused = _ask(client)
    finally:
        host.stop()
    assert caps and "max-tokens 150" in caps[0]
    assert refused.status_code == 429 and "max-tokens" in refused.text
    assert len(model.requests) == 2                  # the refused call never left the host


def test_only_the_declared_api_is_reachable(tmp_path, model):
    host, route, client, caps = _proxy(tmp_path, model)
    try:
        resp = client.get("/v1/models", headers={"host": "example.invalid"})
        other = client.get("/v1/models")
    finally:
        host.stop()
    # a foreign Host header changes nothing: the path goes to the declared API
    assert resp.status_code == 404 and other.status_code == 404
    assert all(r["path"] == "/v1/models" for r in model.requests)


def test_usage_from_streams_and_replies():
    anthropic = [{"type": "message_start", "message": {"usage": {"input_tokens": 7,
                                                                 "output_tokens": 1}}},
                 {"type": "message_delta", "usage": {"output_tokens": 30}}]
    assert parse_usage(anthropic) == {"input_tokens": 7, "output_tokens": 30}
    openai = [{"usage": {"prompt_tokens": 5, "completion_tokens": 9}}]
    assert parse_usage(openai) == {"input_tokens": 5, "output_tokens": 9}
    assert parse_usage([{"response": {"usage": {"input_tokens": 3, "output_tokens": 4}}}]) \
        == {"input_tokens": 3, "output_tokens": 4}


def _broken_model(mode: str) -> RawServer:
    """An upstream that misbehaves: `cut` starts a stream (message_start with its usage)
    and drops the connection mid-reply; `garbage` answers with something that is not HTTP."""

    def handle(conn) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), b"0"))
        while len(body) < length:
            more = conn.recv(65536)
            if not more:
                return
            body += more
        if mode == "garbage":
            conn.sendall(b"SSH-2.0-not-http\r\n\r\n")
            return
        event = {"type": "message_start", "message": {
            "usage": {"input_tokens": 5000, "output_tokens": 1}}}
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"event: message_start\ndata: " + json.dumps(event).encode() + b"\n\n"
        conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        # ... and the connection drops before the stream ends

    return RawServer(handle)


@pytest.mark.parametrize("mode", ["cut", "garbage"])
def test_a_broken_upstream_is_recorded_and_counted(tmp_path, mode):
    """A reply cut mid-stream still counts the tokens it reported (the caps hold) and is in
    the transcript; a reply that is not HTTP is a 502 saying so, also in the transcript."""
    upstream = _broken_model(mode)
    host, route, client, caps = _proxy(tmp_path, upstream, max_tokens=1000)
    try:
        try:
            resp = _ask(client)
        except aiohttp.ClientError:  # the cut stream reaches the agent cut
            resp = None
        refused = _ask(client) if mode == "cut" else None
    finally:
        host.stop()
        upstream.stop()
    lines = [json.loads(x) for x in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    if mode == "garbage":
        assert resp is not None and resp.status_code == 502, resp and resp.text
        assert "sforge model proxy" in resp.text and upstream.url in resp.text
        assert lines[0]["status"] == 502 and "error" in lines[0]
    else:
        assert route.usage.input_tokens == 5000 and caps  # counted: over the cap of 1000
        assert refused is not None and refused.status_code == 429
        assert lines[0]["usage"]["input_tokens"] == 5000
        assert "cut" in lines[0]["error"] or "closed" in lines[0]["error"] \
            or "payload" in lines[0]["error"].lower()


def test_a_stream_event_with_unicode_line_separators_is_kept():
    """SSE lines end at CR or LF only: text with U+2028 inside an event's JSON is one
    event, kept whole in the transcript."""
    from sforge.runs.proxy import _decode_body

    delta = {"type": "content_block_delta", "delta": {"type": "text_delta",
                                                      "text": "a\u2028b\u2029c\x85d"}}
    stop = {"type": "message_delta", "usage": {"output_tokens": 3}}
    body = (f"event: content_block_delta\ndata: {json.dumps(delta, ensure_ascii=False)}\n\n"
            f"event: message_delta\r\ndata: {json.dumps(stop)}\r\n\r\n").encode()
    kept, events = _decode_body(body, "text/event-stream")
    assert kept == [delta, stop] and events == kept


def test_the_transcript_is_bounded(tmp_path, model):
    """Every call is recorded, but bodies only while the transcript is under its cap: an
    agent sending huge requests cannot fill the host's disk through it."""
    host, route, client, caps = _proxy(tmp_path, model, transcript_max_bytes=1500)
    try:
        for _ in range(4):
            assert _ask(client, stream=False).status_code == 200
    finally:
        host.stop()
    text = (tmp_path / "transcript.jsonl").read_text()
    lines = [json.loads(x) for x in text.splitlines()]
    assert len(lines) == 4 and all(x["usage"]["output_tokens"] for x in lines)
    assert "request" in lines[0] and "omitted" in lines[-1]["bodies"]
    assert len(text) < 1500 + 3 * 1024
