"""Proofs of a task: the oracle agent (the task's [reference]) must get full marks and the
nop agent (the workspace as shipped) must stay at the floor. Their run records
(runs/<run>/<task>/<repeat>/run.json, made by `sforge prove` or `sforge run --agent
oracle|nop`) are read here, and judged by the rules of sforge.benchmark.verdicts, so the
report, `sforge prove` and `sforge check --integrity` decide alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Benchmark, Task
from sforge.benchmark.verdicts import above_floor, full_marks
from sforge.core.fileio import read_json

ORACLE, NOP = "oracle", "nop"
PROOF_AGENTS = (ORACLE, NOP)


@dataclass(frozen=True)
class Proof:
    """One proof run's outcome: ok True (proven), False (the task is broken), None (cannot
    be told: a minimized task without a rescale table)."""
    task: str
    agent: str
    run: str
    ok: bool | None
    why: str
    best_score: float | None
    best_rescaled: float | None
    ended_at: str


def judge_proof(task: Task, agent: str, record: dict[str, Any]) -> tuple[bool | None, str]:
    """(ok, why) of a proof run's record: the best valid verdict of its submissions."""
    score = record.get("best_score")
    valid = isinstance(score, int | float) and not isinstance(score, bool)
    shown = f"raw {score:g}" if valid else "no valid submission"
    if record.get("best_rescaled") is not None:
        shown += f", rescaled {record['best_rescaled']:g}"
    if agent == ORACLE:
        ok = full_marks(task, valid, score if valid else None)
        return ok, f"oracle {'has full marks' if ok else 'fails: not full marks'} ({shown})"
    pays = above_floor(task, valid, score if valid else None)
    if pays is None:
        return None, f"no-op: cannot tell (minimized, no rescale table; {shown})"
    return (not pays), f"no-op {'scores above the floor' if pays else 'at the floor'} ({shown})"


def read_proofs(bench: Benchmark, root: Path) -> dict[str, dict[str, Proof]]:
    """task → agent → its newest finished proof run (by ended_at), from the run records
    under the results directory `root`."""
    found: dict[str, dict[str, Proof]] = {}
    runs = Layout(root).runs
    for agent in PROOF_AGENTS:
        for path in runs.glob(f"{agent}-*/*/*/run.json"):
            try:
                record = read_json(path)
            except (OSError, ValueError):
                continue
            task = bench.tasks.get(str(record.get("task")))
            if not isinstance(record, dict) or record.get("agent") != agent or task is None:
                continue
            ok, why = judge_proof(task, agent, record)
            proof = Proof(task=task.id, agent=agent, run=str(record.get("run")), ok=ok, why=why,
                          best_score=record.get("best_score"),
                          best_rescaled=record.get("best_rescaled"),
                          ended_at=str(record.get("ended_at") or ""))
            old = found.setdefault(task.id, {}).get(agent)
            if old is None or proof.ended_at > old.ended_at:
                found[task.id][agent] = proof
    return found


def proof_badge(proofs: dict[str, Proof]) -> tuple[str, str, bool]:
    """(short text, the reasons, whether it is a problem) of one task's proofs."""
    if not proofs:
        return "", "run sforge prove", False
    parts, why, bad = [], [], False
    for agent in PROOF_AGENTS:
        p = proofs.get(agent)
        if p is None:
            why.append(f"{agent}: not run")
            continue
        why.append(p.why)
        if p.ok is False:
            bad = True
            parts.append("oracle fails" if agent == ORACLE else "no-op pays")
    if not parts:
        parts.append("proven" if all(a in proofs and proofs[a].ok for a in PROOF_AGENTS)
                     else "partly proven")
    return ", ".join(parts), "; ".join(why), bad
