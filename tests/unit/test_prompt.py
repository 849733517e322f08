"""The agent's prompt: instruction.md after a preamble about the loop (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

from sforge.benchmark.model import Environment, Judge, Score, SubmissionRules, Task
from sforge.runs.prompt import build_prompt, submit_env


def _task() -> Task:
    return Task(id="t", dir=Path("/x"), name="T", version="1",
                environment=Environment(cwd="/home/workspace/t"),
                submission=SubmissionRules(paths=("solve.py", "lib"), exclude=("lib/cache",)),
                judge=Judge(cmd="true"), score=Score(direction="minimize"))


def test_preamble_then_instruction():
    text = build_prompt(_task(), "# Do the thing\n", 5400, "2026-12-01T05:00:00+00:00",
                        budget=20, cooldown_s=30)
    head, instruction = text.split("# The task\n")
    assert instruction.strip() == "# Do the thing"
    for needed in ("sforge-submit", "`solve.py`, `lib`", "`lib/cache`", "/home/workspace/t",
                   "90 minutes", "2026-12-01T05:00:00+00:00", "at most 20 times",
                   "30 s between", "best valid score", "minimize", "no internet",
                   "graded too"):
        assert needed in head, needed


def test_submit_env_is_the_tasks_rules():
    env = submit_env(_task())
    assert json.loads(env["SFORGE_SUBMIT_PATHS"]) == ["solve.py", "lib"]
    assert json.loads(env["SFORGE_SUBMIT_EXCLUDE"]) == ["lib/cache"]
