"""A scripted model server on loopback that speaks the Anthropic Messages API (streaming SSE
and plain JSON) and OpenAI's Responses API (streaming, as codex uses it), for driving real
agent CLIs without a real model.

Each reply is chosen by how many tool results the conversation already holds: step n of the
script is a Bash tool call with that command, and past the end the model says it is done.
Every request is recorded with the credential headers it arrived with.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

INPUT_TOKENS = 100
OUTPUT_TOKENS = 20


@dataclass
class ScriptedModel:
    commands: list[str]                # Bash commands, one per tool round
    final_text: str = "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    # reply content ------------------------------------------------------------------
    def _step(self, body: dict[str, Any]) -> int:
        n = 0
        for msg in body.get("messages", []):
            content = msg.get("content")
            if isinstance(content, list):
                n += sum(1 for c in content if isinstance(c, dict)
                         and c.get("type") == "tool_result")
        return n

    def _blocks(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        tools = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
        n = self._step(body)
        if "Bash" in tools and n < len(self.commands):
            return [{"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                     "input": {"command": self.commands[n],
                               "description": f"scripted step {n}"}}], "tool_use"
        return [{"type": "text", "text": self.final_text}], "end_turn"

    # HTTP -----------------------------------------------------------------------------
    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"path": request.path_qs, "body": body,
                              "x-api-key": request.headers.get("x-api-key"),
                              "authorization": request.headers.get("authorization")})
        blocks, stop = self._blocks(body)
        model = body.get("model", "scripted")
        usage = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}
        if not body.get("stream"):
            return web.json_response({"id": "msg_scripted", "type": "message",
                                      "role": "assistant", "model": model, "content": blocks,
                                      "stop_reason": stop, "stop_sequence": None,
                                      "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

        await send("message_start", {"type": "message_start", "message": {
            "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}})
        for i, block in enumerate(blocks):
            if block["type"] == "tool_use":
                start = dict(block, input={})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            await send("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": start})
            await send("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": delta})
            await send("content_block_stop", {"type": "content_block_stop", "index": i})
        await send("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": OUTPUT_TOKENS}})
        await send("message_stop", {"type": "message_stop"})
        await resp.write_eof()
        return resp

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's Responses API, streamed, as codex speaks it: step n of the script is a
        call of codex's shell tool (`exec_command`, arguments {"cmd": ...}), counted by the
        function_call_output items the conversation already holds."""
        body = await request.json()
        self.requests.append({"path": request.path_qs, "body": body,
                              "x-api-key": request.headers.get("x-api-key"),
                              "authorization": request.headers.get("authorization")})
        items = body.get("input", [])
        n = sum(1 for item in items if isinstance(item, dict)
                and item.get("type") == "function_call_output")
        tools = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
        if "exec_command" in tools and n < len(self.commands):
            item = {"type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}",
                    "name": "exec_command", "status": "completed",
                    "arguments": json.dumps({"cmd": self.commands[n]})}
        else:
            item = {"type": "message", "id": f"msg_{n:04d}", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": self.final_text,
                                 "annotations": []}]}
        rid = f"resp_{len(self.requests):04d}"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(data: dict[str, Any]) -> None:
            await resp.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())

        response = {"id": rid, "object": "response", "status": "in_progress",
                    "model": body.get("model", "scripted"), "output": []}
        await send({"type": "response.created", "response": response})
        await send({"type": "response.output_item.added", "output_index": 0, "item": item})
        await send({"type": "response.output_item.done", "output_index": 0, "item": item})
        usage = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                 "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        await send({"type": "response.completed", "response": dict(
            response, status="completed", output=[item], usage=usage)})
        await resp.write_eof()
        return resp

    async def other(self, request: web.Request) -> web.Response:
        self.requests.append({"path": request.path_qs, "body": None,
                              "x-api-key": request.headers.get("x-api-key"),
                              "authorization": request.headers.get("authorization")})
        return web.json_response({"type": "error", "error": {"type": "not_found_error",
                                                             "message": "scripted server"}},
                                 status=404)

    # life -----------------------------------------------------------------------------
    def start(self) -> ScriptedModel:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def boot() -> None:
            app = web.Application()
            app.router.add_post("/v1/messages", self.messages)
            app.router.add_post("/v1/responses", self.responses)
            app.router.add_route("*", "/{tail:.*}", self.other)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()

        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(boot(), self._loop).result(10)
        ready.wait(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
