"""The host side of a run's sockets: the model proxy and the service relay, both on Unix
sockets in the folder mounted into the work container at /run/sforge.

The model proxy is how an agent reaches its model API without ever holding the key. It
forwards every request to the agent's one declared API host (nothing else: the path is
appended to that origin, an absolute URL is refused), adds the key there from the host's
environment (the container sees a placeholder), and reads each reply on its way through:
token usage goes into the run's totals and every exchange (request and reply bodies, never
headers) into transcript.jsonl beside the run record. When a cap (tokens or USD) is reached
it answers further calls with an error and tells the run to stop; when the API fails every
call (model_health), it tells the run it is broken.

The service relay forwards the container's connections to the judge service, wherever it is
(a Unix socket on this host, or http://host:port on another machine, as from a cluster node).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from sforge.core.clock import now_iso
from sforge.runs.model_health import ModelHealth
from sforge.runs.origin import check_api_url

TRANSCRIPT_MAX_BYTES = 1 << 30

# Connections one run may hold open to the judge service at once through its relay: the
# service is shared by every run, so one agent opening thousands (and sending nothing)
# must not take its file descriptors. One more is answered 503 (clients retry) and closed.
MAX_RELAYED = 32
_RELAY_FULL = json.dumps({"error": "too many connections from this run to the judge service "
                          f"(at most {MAX_RELAYED} at once); retry", "reason": "connections"})

# Hop-by-hop and credential headers never cross the proxy as sent by the container.
_DROP_REQUEST = {"host", "connection", "keep-alive", "proxy-authorization", "te", "trailer",
                 "transfer-encoding", "upgrade", "content-length", "accept-encoding",
                 "authorization", "x-api-key", "api-key", "x-goog-api-key"}
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length",
                  "content-encoding", "upgrade"}
_USAGE_FIELDS = {
    "input_tokens": "input_tokens", "prompt_tokens": "input_tokens",
    "output_tokens": "output_tokens", "completion_tokens": "output_tokens",
    "cache_creation_input_tokens": "cache_creation_input_tokens",
    "cache_read_input_tokens": "cache_read_input_tokens",
}


def _usages(obj: Any) -> list[dict[str, Any]]:
    """`usage` objects in one reply or stream event (Anthropic's message/message_delta,
    OpenAI's chat completion and responses events)."""
    if not isinstance(obj, dict):
        return []
    found = [obj["usage"]] if isinstance(obj.get("usage"), dict) else []
    for key in ("message", "response"):
        if isinstance(obj.get(key), dict) and isinstance(obj[key].get("usage"), dict):
            found.append(obj[key]["usage"])
    return found


def parse_usage(events: list[Any]) -> dict[str, int]:
    """Token counts of one call. A stream repeats counts cumulatively (message_start, then
    message_delta), so each field takes its largest value."""
    out: dict[str, int] = {}
    for event in events:
        for usage in _usages(event):
            for key, name in _USAGE_FIELDS.items():
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    out[name] = max(out.get(name, 0), value)
    return out


def reply_models(events: list[Any]) -> list[str]:
    """The `model` the API named in one reply or stream event (top level, or in Anthropic's
    `message` / OpenAI's `response`): which model answered, as the API says, not as asked."""
    found: list[str] = []
    for event in events:
        if not isinstance(event, dict):
            continue
        for obj in (event, event.get("message"), event.get("response")):
            if isinstance(obj, dict) and isinstance(obj.get("model"), str) \
                    and obj["model"] not in found:
                found.append(obj["model"])
    return found


def _decode_body(body: bytes, content_type: str) -> tuple[Any, list[Any]]:
    """(what the transcript keeps, the JSON events to read usage from)."""
    text = body.decode("utf-8", errors="replace")
    if "text/event-stream" in content_type:
        events = []
        # SSE lines end at CR, LF or CRLF only (str.splitlines would also cut at U+2028 and
        # friends, which JSON allows raw inside strings)
        for line in re.split(r"\r\n|\r|\n", text):
            if line.startswith("data:"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line[5:].strip()))
        return events, events
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return text, []
    return data, [data]


@dataclass
class Usage:
    """What a run has spent through the model proxy so far, and why it was capped if it was."""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: float | None = None
    capped: str | None = None  # why the proxy stopped the run, if it did

    @property
    def total_tokens(self) -> int:
        """Every token counted, cache reads and writes included (what max-tokens bounds)."""
        return (self.input_tokens + self.output_tokens + self.cache_creation_input_tokens
                + self.cache_read_input_tokens)

    def as_dict(self) -> dict[str, Any]:
        """The usage as stored in the run's record, total tokens included."""
        return {"calls": self.calls, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "cache_creation_input_tokens": self.cache_creation_input_tokens,
                "cache_read_input_tokens": self.cache_read_input_tokens,
                "total_tokens": self.total_tokens, "cost_usd": self.cost_usd,
                "capped": self.capped}


@dataclass
class ModelRoute:
    """Where the proxy forwards model calls, with the key, prices and caps it applies."""
    upstream: str                        # scheme://host[:port][/prefix] of the API
    key: str | None                      # added on the host side only
    key_header: str
    key_prefix: str = ""
    price: dict[str, float] | None = None  # USD per million tokens: input, output
    max_tokens: int | None = None
    max_cost: float | None = None
    transcript: Path | None = None
    # bodies are kept while the transcript is under this; past it, each call's line only
    # (time, path, status, usage): huge requests cannot fill the host's disk through it
    transcript_max_bytes: int = TRANSCRIPT_MAX_BYTES
    on_cap: Callable[[str], None] = lambda reason: None
    # whether the API answers at all: on_fail(reason) once its calls fail past the threshold
    health: ModelHealth | None = None
    on_fail: Callable[[str], None] = lambda reason: None
    usage: Usage = field(default_factory=Usage)
    api_models: list[str] = field(default_factory=list)  # as the API's replies named them

    def add(self, call: dict[str, int], models: Sequence[str] = ()) -> None:
        """Count one call's tokens and cost, and the models its reply named; the first cap
        reached is recorded and reported once."""
        self.api_models.extend(m for m in models if m not in self.api_models)
        u = self.usage
        u.calls += 1
        for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                     "cache_read_input_tokens"):
            setattr(u, name, getattr(u, name) + call.get(name, 0))
        if self.price is not None:
            # cache tokens are counted at the input price: an upper bound, never an undercount
            inputs = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            u.cost_usd = round((inputs * self.price["input"]
                                + u.output_tokens * self.price["output"]) / 1e6, 6)
        if u.capped is None:
            if self.max_tokens is not None and u.total_tokens >= self.max_tokens:
                u.capped = f"max-tokens {self.max_tokens} reached ({u.total_tokens} used)"
            elif (self.max_cost is not None and u.cost_usd is not None
                  and u.cost_usd >= self.max_cost):
                u.capped = f"max-cost {self.max_cost} USD reached ({u.cost_usd} USD)"
            if u.capped:
                self.on_cap(u.capped)


class HostSockets:
    """A background event loop serving a run's Unix sockets until stop()."""

    def __init__(self, folder: Path, service: str | None, model: ModelRoute | None):
        self.folder = folder
        self.service = service
        self.model = model
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="sforge-run-sockets")
        self._cleanup: list[Any] = []
        self._relays: set[asyncio.Task] = set()
        self._session: ClientSession | None = None
        self._lock = threading.Lock()

    # life -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop's thread and open the sockets; returns once they are listening."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)

    def stop(self) -> None:
        """Close the sockets and end the loop's thread; safe to call twice or before start."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        if self.service:
            server = await asyncio.start_unix_server(self._relay, str(self.folder / "service.sock"))
            self._cleanup.append(server)
        if self.model:
            check_api_url(self.model.upstream, "model API")
            self._session = ClientSession(
                connector=TCPConnector(limit=16), auto_decompress=True,
                timeout=ClientTimeout(total=None, sock_connect=30, sock_read=600))
            app = web.Application(client_max_size=64 << 20)
            app.router.add_route("*", "/{tail:.*}", self._forward)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.UnixSite(runner, str(self.folder / "model.sock")).start()
            self._cleanup.append(runner)

    async def _stop(self) -> None:
        for task in list(self._relays):
            task.cancel()
        if self._relays:
            await asyncio.gather(*self._relays, return_exceptions=True)
        for item in self._cleanup:
            if isinstance(item, web.AppRunner):
                await item.cleanup()
            else:
                item.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(item.wait_closed(), 2)
        if self._session:
            await self._session.close()

    # service relay ------------------------------------------------------------------
    async def _open_service(self):
        target = self.service or ""
        if target.startswith("unix://"):
            return await asyncio.open_unix_connection(target[len("unix://"):])
        parts = urlsplit(target)
        return await asyncio.open_connection(parts.hostname, parts.port or 80)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._relays) >= MAX_RELAYED:
            with contextlib.suppress(OSError):
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                             b"Content-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(_RELAY_FULL),
                                                                  _RELAY_FULL.encode()))
                await writer.drain()
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._relays.add(task)
            task.add_done_callback(self._relays.discard)
        try:
            up_reader, up_writer = await self._open_service()
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(1 << 16):
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()
            except (OSError, ConnectionError):
                pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    # model proxy --------------------------------------------------------------------
    async def _forward(self, request: web.Request) -> web.StreamResponse:
        route = self.model
        assert route is not None and self._session is not None
        if request.path_qs.startswith(("http:", "https:", "//")) or request.method == "CONNECT":
            return web.json_response({"error": "sforge model proxy: only the agent's API "
                                      f"{route.upstream} is reachable"}, status=403)
        if route.usage.capped:
            return web.json_response(
                {"type": "error", "error": {"type": "rate_limit_error",
                                            "message": f"sforge: {route.usage.capped}"}},
                status=429)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        headers["Accept-Encoding"] = "identity"
        if route.key:
            headers[route.key_header] = route.key_prefix + route.key
        started = time.monotonic()
        url = route.upstream.rstrip("/") + request.path_qs
        reply = bytearray()
        resp: web.StreamResponse | None = None
        error = None
        up_headers: dict[str, str] = {}
        try:
            async with self._session.request(request.method, url, headers=headers,
                                             data=body, allow_redirects=False) as up:
                status, ctype = up.status, up.headers.get("Content-Type", "")
                up_headers = dict(up.headers)
                resp = web.StreamResponse(status=up.status, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in _DROP_RESPONSE})
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    reply += chunk
                    await resp.write(chunk)
                await resp.write_eof()
        except (ClientError, OSError, TimeoutError) as exc:
            # Unreachable, not HTTP, or cut mid-reply: the call is still recorded, with the
            # tokens its reply reported so far (the caps count what was spent).
            error = f"{type(exc).__name__}: {exc}".rstrip(": ")
            if resp is None or not resp.prepared:
                status, ctype = 502, "application/json"
                reply = bytearray(json.dumps({"error": f"sforge model proxy: {route.upstream}"
                                              f" failed: {error}"}).encode())
                resp = web.Response(status=502, body=bytes(reply),
                                    content_type="application/json")
            elif request.transport is not None:
                request.transport.close()  # the agent sees the reply cut, as it came
        kept, events = _decode_body(bytes(reply), ctype)
        call = parse_usage(events)
        with self._lock:
            route.add(call, reply_models(events) if status < 400 else [])
            failed = route.health.record(status, kept, up_headers, error) \
                if route.health else None
        if failed:
            route.on_fail(failed)
        if route.transcript is not None:
            req_ct = request.headers.get("Content-Type", "")
            entry: dict[str, Any] = {
                "at": now_iso("milliseconds"),
                "method": request.method, "path": request.path_qs, "status": status,
                "seconds": round(time.monotonic() - started, 3), "usage": call}
            if error:
                entry["error"] = error
            with route.transcript.open("a") as fh:
                line = json.dumps({**entry, "request": _decode_body(body, req_ct)[0],
                                   "response": kept})
                if fh.tell() + len(line) >= route.transcript_max_bytes:
                    line = json.dumps({**entry, "bodies": "omitted: the transcript is at its "
                                       f"cap of {route.transcript_max_bytes} bytes"})
                fh.write(line + "\n")
        return resp
