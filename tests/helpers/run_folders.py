"""Run folders built by hand (results/<bench>/runs/<run>/<task>/<repeat>/), as `sforge run`
leaves them: a done run with rounds, result files and a hostile transcript, a failed and an
interrupted attempt, a running one. For the runs pages' unit and browser tests."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from sforge.core.fileio import atomic_write_json
from sforge.grading.results import EvalResult

HOSTILE = "<script>alert('pwned')</script></details></pre><b>bold</b>"
KEY_GOOD, KEY_BAD = "a" * 16, "b" * 16


def _sub(i: int, key: str, valid: bool, score: float | None, final: bool = False,
         reason: str | None = None) -> dict[str, Any]:
    return {"id": i, "round": i, "sha256": f"{i:064x}", "key": key, "final": final,
            "state": "done", "elapsed_s": 10.0 * i, "valid": valid, "score": score,
            "rescaled": None if score is None else score * 10, "summary": f"round {i}",
            "reason": reason}


def transcript_lines() -> list[dict[str, Any]]:
    """Three Anthropic calls (JSON, JSON, a stream) and one OpenAI chat call, with agent
    output that tries to break out of the page."""
    first = [{"role": "user", "content": [{"type": "text", "text": "Solve the task. " + HOSTILE}]}]
    reply1 = {"content": [{"type": "text", "text": "I will look around"},
                          {"type": "tool_use", "id": "t1", "name": "bash",
                           "input": {"command": "cat solve.py # " + HOSTILE}}],
              "usage": {"input_tokens": 100, "output_tokens": 20}}
    # sent again with Claude Code's prompt-cache marker: still the same message
    cached = [{"role": "user", "content": [dict(first[0]["content"][0],
                                                cache_control={"type": "ephemeral"})]}]
    second = cached + [{"role": "assistant", "content": reply1["content"]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                    "content": "needle-in-output " + HOSTILE}]}]
    reply2 = {"content": [{"type": "text", "text": "Now I submit"}],
              "usage": {"input_tokens": 150, "output_tokens": 5}}
    third = second + [{"role": "assistant", "content": reply2["content"]},
                      {"role": "user", "content": "go on"}]
    stream = [{"type": "message_start", "message": {"usage": {"input_tokens": 170}}},
              {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "streamed "}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "answer"}},
              {"type": "content_block_start", "index": 1,
               "content_block": {"type": "tool_use", "name": "submit", "input": {}}},
              {"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": '{"final": tr'}},
              {"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": "ue}"}},
              {"type": "message_delta", "usage": {"output_tokens": 9}}]
    chat = {"model": "gpt", "messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hi"}]}
    chat_reply = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "shell", "arguments": "{\"cmd\": \"ls\"}"}}]}}]}
    base = {"method": "POST", "path": "/v1/messages", "status": 200, "seconds": 1.5}
    return [
        {**base, "at": "2026-01-01T00:00:01.000Z", "usage": reply1["usage"],
         "request": {"system": "You are an agent", "messages": first}, "response": reply1},
        {**base, "at": "2026-01-01T00:00:02.000Z", "usage": reply2["usage"],
         "request": {"system": "You are an agent", "messages": second}, "response": reply2},
        {**base, "at": "2026-01-01T00:00:03.000Z", "usage": {"output_tokens": 9},
         "request": {"system": "You are an agent", "messages": third}, "response": stream},
        {**base, "path": "/v1/chat/completions", "at": "2026-01-01T00:00:04.000Z",
         "usage": {}, "request": chat, "response": chat_reply},
    ]


def make_runs(root: Path, task: str = "min_task") -> dict[str, Path]:
    """Four run folders under root/runs and the result files of the done one's rounds.
    → name → folder."""
    folders = {name: root / "runs" / run / t / rep for name, (run, t, rep) in {
        "done": ("r1", task, "1"), "failed": ("r1", task, "2"),
        "interrupted": ("r1", "other_task", "1"), "running": ("r2", task, "1")}.items()}
    for folder in folders.values():
        folder.mkdir(parents=True)
    subs = [_sub(1, KEY_GOOD, True, 4.0), _sub(2, KEY_BAD, False, None, final=True,
                                              reason="judge timed out " + HOSTILE)]
    base = {"run": "r1", "task": task, "agent": "claude-code", "model": "claude-x",
            "source": "r1", "started_at": "2026-01-01T00:00:00+00:00"}
    atomic_write_json(folders["done"] / "run.json", {
        **base, "repeat": 1, "state": "done", "rounds": 2, "submissions": subs,
        "best_score": 4.0, "best_rescaled": 40.0, "elapsed_s": 321.5, "stopped_by": "agent",
        "usage": {"input_tokens": 420, "output_tokens": 34, "cost_usd": 0.0123},
        "error": None})
    (folders["done"] / "agent.log").write_text("[sforge] starting\n" + HOSTILE + "\n")
    with (folders["done"] / "transcript.jsonl").open("w") as fh:
        for line in transcript_lines():
            fh.write(json.dumps(line) + "\n")
    EvalResult(task=task, submission=subs[0]["sha256"], key=KEY_GOOD, valid=True, score=4.0,
               summary="4 of 5", details=[
                   {"name": "case_ok", "status": "PASSED", "score": 1},
                   {"name": "case_wrong", "status": "FAILED", "score": 0,
                    "message": "expected 3, got 4 " + HOSTILE}]).write(
        root / "evals" / task / f"{KEY_GOOD}.json")
    atomic_write_json(folders["failed"] / "attempt-1.json", {
        **base, "repeat": 2, "state": "failed", "rounds": 0, "submissions": [],
        "error": "model API: 401 invalid x-api-key " + HOSTILE})
    atomic_write_json(folders["interrupted"] / "attempt-1.json", {
        **base, "task": "other_task", "repeat": 1, "rounds": 1,
        "submissions": [_sub(1, "c" * 16, True, 2.0)], "best_score": 2.0})
    atomic_write_json(folders["running"] / "running.json", {
        **base, "run": "r2", "repeat": 1, "pid": os.getpid(), "host": socket.gethostname()})
    return folders
