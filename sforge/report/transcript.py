"""A run's transcript.jsonl (the model proxy's record of every call: request and reply bodies)
read as what a person follows: per call, the messages new since the call before, the model's
reply, its tool calls and the tool results, in Anthropic's and OpenAI's (chat and responses)
shapes; anything else as its JSON. Bounded: a transcript may hold a gigabyte, a page does not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_TEXT = 20_000          # characters of one message shown; the rest is cut with a note
MAX_LINE_BYTES = 8 << 20   # a longer transcript line is shown by its size only
MAX_PAGE_CHARS = 4_000_000  # past this much text, the page stops and points at the file


@dataclass(frozen=True)
class Item:
    """One readable piece of a call: kind is system, user, assistant, thinking, tool-call,
    tool-result or other; title says which (a tool's name, a role)."""
    kind: str
    title: str
    text: str


@dataclass
class Call:
    """One model call: when, where, how it went, and its new messages and reply."""
    index: int
    at: str
    path: str
    status: Any
    seconds: Any
    usage: dict[str, Any]
    error: str | None
    skipped: int                      # earlier messages, shown with the calls before
    same_system: bool                 # the system prompt of the call before, not shown again
    items: list[Item] = field(default_factory=list)
    reply: list[Item] = field(default_factory=list)
    note: str | None = None           # bodies omitted at the proxy's cap, a bad line


@dataclass
class Transcript:
    """The calls of a transcript file, and whether the page stopped before its end."""
    calls: list[Call]
    truncated: bool = False
    error: str | None = None


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """At most `limit` characters, saying how many more there were."""
    return text if len(text) <= limit else \
        f"{text[:limit]}\n… ({len(text) - limit} more characters in transcript.jsonl)"


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False)


def _content_items(role: str, content: Any) -> list[Item]:
    """The items of one message's content: a string, or Anthropic/OpenAI content blocks."""
    kind = role if role in ("system", "user", "assistant") else "other"
    if content is None:
        return []
    if isinstance(content, str):
        return [Item(kind, role, content)]
    if not isinstance(content, list):
        return [Item("other", role, _json(content))]
    out = []
    for block in content:
        if not isinstance(block, dict):
            out.append(Item(kind, role, _json(block)))
            continue
        btype = block.get("type")
        if btype in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
            out.append(Item(kind, role, block["text"]))
        elif btype in ("thinking", "redacted_thinking", "reasoning"):
            out.append(Item("thinking", role, _json(block.get("thinking")
                                                     or block.get("summary") or block)))
        elif btype in ("tool_use", "server_tool_use"):
            out.append(Item("tool-call", str(block.get("name", "?")), _json(block.get("input"))))
        elif btype == "tool_result":
            out.append(Item("tool-result", str(block.get("tool_use_id", "")),
                            "\n".join(i.text for i in _content_items("tool",
                                                                    block.get("content")))))
        else:
            out.append(Item("other", f"{role} {btype}", _json(block)))
    return out


def message_items(message: Any) -> list[Item]:
    """A request message (or an OpenAI responses input item) as items."""
    if not isinstance(message, dict):
        return [Item("other", "message", _json(message))]
    mtype = message.get("type")
    if mtype == "function_call":
        return [Item("tool-call", str(message.get("name", "?")),
                     _json(message.get("arguments")))]
    if mtype == "function_call_output":
        return [Item("tool-result", str(message.get("call_id", "")),
                     _json(message.get("output")))]
    if mtype == "reasoning":
        return [Item("thinking", "reasoning", _json(message.get("summary") or message))]
    role = str(message.get("role", mtype or "other"))
    if role == "tool":
        return [Item("tool-result", str(message.get("tool_call_id", "")),
                     "\n".join(i.text for i in _content_items("tool", message.get("content"))))]
    out = _content_items(role, message.get("content"))
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        out.append(Item("tool-call", str(fn.get("name", "?")), _json(fn.get("arguments"))))
    return out


# Fields a client changes in messages it sends again without changing what they say (Claude
# Code moves its prompt-cache marker to the newest message at every call).
_VOLATILE = frozenset({"cache_control"})


def _plain(value: Any) -> Any:
    """A message without its volatile fields: what tells whether a call repeats another's."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _request_messages(request: Any) -> tuple[list[Any], list[Item]]:
    """(the conversation's messages, the system items) of a request body."""
    if not isinstance(request, dict):
        return [], [Item("other", "request", _json(request))] if request else []
    system: list[Item] = []
    for key in ("system", "instructions"):
        if request.get(key):
            system += [Item("system", key, i.text)
                       for i in _content_items("system", request[key])]
    messages = request.get("messages", request.get("input", []))
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return (messages if isinstance(messages, list) else [messages]), system


def _stream_reply(events: list[Any]) -> list[Item]:
    """The reply assembled from server-sent events (Anthropic's content blocks and deltas,
    OpenAI's chat deltas, OpenAI responses' completed response)."""
    blocks: dict[int, dict[str, Any]] = {}
    chat_text: list[str] = []
    chat_tools: dict[int, dict[str, str]] = {}
    done_items: list[Any] = []  # OpenAI responses' output items, as they finish
    for ev in events:
        if not isinstance(ev, dict):
            continue
        etype = ev.get("type")
        if etype == "response.output_item.done":
            done_items.append(ev.get("item"))
        if etype == "response.completed" and isinstance(ev.get("response"), dict) \
                and ev["response"].get("output"):
            return reply_items(ev["response"])
        if etype == "content_block_start" and isinstance(ev.get("content_block"), dict):
            blocks[int(ev.get("index", len(blocks)))] = dict(ev["content_block"], _json="")
        elif etype == "content_block_delta" and isinstance(ev.get("delta"), dict):
            block = blocks.setdefault(int(ev.get("index", 0)), {"type": "text", "_json": ""})
            delta = ev["delta"]
            for key in ("text", "thinking"):
                if isinstance(delta.get(key), str):
                    block[key] = block.get(key, "") + delta[key]
            if isinstance(delta.get("partial_json"), str):
                block["_json"] += delta["partial_json"]
        for choice in ev.get("choices") or []:
            delta = choice.get("delta") or {} if isinstance(choice, dict) else {}
            if isinstance(delta.get("content"), str):
                chat_text.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                slot = chat_tools.setdefault(int(tc.get("index", 0)), {"name": "", "args": ""})
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["args"] += fn.get("arguments") or ""
    out = [i for item in done_items for i in message_items(item)]
    for _, block in sorted(blocks.items()):
        raw = block.pop("_json")
        if raw and block.get("type") in ("tool_use", "server_tool_use"):
            try:
                block["input"] = json.loads(raw)
            except ValueError:
                block["input"] = raw
        out += _content_items("assistant", [block])
    if chat_text:
        out.append(Item("assistant", "assistant", "".join(chat_text)))
    out += [Item("tool-call", t["name"] or "?", t["args"]) for _, t in sorted(chat_tools.items())]
    return out


def reply_items(response: Any) -> list[Item]:
    """The model's reply in a response body (JSON, or the list of its stream's events)."""
    if isinstance(response, list):
        return _stream_reply(response)
    if not isinstance(response, dict):
        return [Item("other", "response", _json(response))] if response else []
    if "error" in response and not response.get("content"):
        return [Item("other", "error", _json(response["error"]))]
    if isinstance(response.get("content"), list):  # Anthropic
        return _content_items("assistant", response["content"])
    if isinstance(response.get("choices"), list):  # OpenAI chat
        out = []
        for choice in response["choices"]:
            if isinstance(choice, dict):
                out += message_items(choice.get("message") or {})
        return out
    if isinstance(response.get("output"), list):  # OpenAI responses
        return [i for item in response["output"] for i in message_items(item)]
    return [Item("other", "response", _json(response))]


def _lines(path: Path) -> Iterator[tuple[int, str | None, int]]:
    """(number, text or None when too long, length in bytes) of every line of the file."""
    with path.open("rb") as fh:
        for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line
                    raw = fh.readline(MAX_LINE_BYTES)
                    size += len(raw)
                yield n, None, size
            else:
                yield n, raw.decode("utf-8", errors="replace"), len(raw)


def read_transcript(path: Path, max_chars: int = MAX_PAGE_CHARS) -> Transcript:
    """The calls of transcript.jsonl, each with the messages its request adds to the call
    before (a request repeats the whole conversation) and its reply; stops after
    `max_chars` characters of text."""
    try:
        return _read(path, max_chars)
    except OSError as exc:
        return Transcript([], error=f"cannot read {path.name}: {exc}")


def _read(path: Path, max_chars: int) -> Transcript:
    calls: list[Call] = []
    previous: list[Any] = []
    previous_system: list[Item] = []
    shown = 0
    for n, text, size in _lines(path):
        if shown > max_chars:
            return Transcript(calls, truncated=True)
        try:
            entry = json.loads(text) if text is not None else None
        except ValueError as exc:
            entry = {"note": f"line {n} is not JSON ({exc})"}
        if entry is None:
            entry = {"note": f"line {n} ({size} bytes) is too long to show here"}
        if not isinstance(entry, dict):
            entry = {"note": f"line {n} is not a JSON object"}
        raw, system = _request_messages(entry.get("request"))
        messages = _plain(raw)
        skipped = 0
        if previous and messages[:len(previous)] == previous:
            skipped = len(previous)
            # the previous reply, as the agent sends it back: already shown as that reply
            if len(messages) > skipped and isinstance(messages[skipped], dict) \
                    and messages[skipped].get("role") == "assistant":
                skipped += 1
        new = raw[skipped:]
        if messages:
            previous = messages
        same_system = system == previous_system
        previous_system = system
        items = ([] if same_system else system) + [i for m in new for i in message_items(m)]
        reply = reply_items(entry.get("response"))
        items = [Item(i.kind, i.title, cut(i.text)) for i in items]
        reply = [Item(i.kind, i.title, cut(i.text)) for i in reply]
        shown += sum(len(i.text) for i in items + reply)
        usage = entry.get("usage")
        calls.append(Call(
            index=len(calls) + 1, at=str(entry.get("at", "")), path=str(entry.get("path", "")),
            status=entry.get("status"), seconds=entry.get("seconds"),
            usage=usage if isinstance(usage, dict) else {},
            error=str(entry["error"]) if entry.get("error") else None, skipped=skipped,
            same_system=same_system and bool(system),
            items=items, reply=reply,
            note=str(entry.get("bodies") or entry.get("note") or "") or None))
    return Transcript(calls)
