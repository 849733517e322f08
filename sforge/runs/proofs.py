"""`sforge prove`'s run targets: per task, one oracle run and one nop run whose run id
hashes everything their verdict depends on (the agent's definition, the task's work and
judge image tags, its judge settings and score table, the oracle's [reference] file, the
grading contract). An unchanged task has the same targets, so Snakemake finds them made; a change
to any of those gives new ones, and the task is proven again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sforge.benchmark.hashing import file_sha256
from sforge.benchmark.model import Task
from sforge.grading.results import GRADING_CONTRACT
from sforge.runs.agents import load_agent
from sforge.runs.spec import RunSpec
from sforge.scores.proofs import ORACLE, PROOF_AGENTS


def proof_run_id(pipe, agent_name: str, task: Task) -> str:
    """`<agent>-<hash>`: the same id exactly while nothing the proof depends on changed."""
    agent = load_agent(agent_name)
    refs = pipe.refs[task.id]
    ref = task.reference
    ref_file = (ref.script or ref.archive) if ref else None
    material = {
        "agent": agent.name, "definition": file_sha256(agent.path), "task": task.id,
        "work": refs["work"].tag, "judge": refs["judge"].tag,
        "judge_settings": task.judge_settings(), "score": repr(task.score),
        "reference": [ref_file, file_sha256(task.dir / ref_file)]
        if agent.reference and ref_file and (task.dir / ref_file).is_file() else None,
        "contract": GRADING_CONTRACT,
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode())
    return f"{agent.name}-{digest.hexdigest()[:16]}"


def proof_source(agent: str) -> str:
    """The one source of an agent's proof runs in the tables (`proof-oracle`, `proof-nop`):
    beside the agents, where the ceiling and the floor are."""
    return f"proof-{agent}"


def proof_specs(pipe, tasks: list[Task], timeout_s: float) -> list[RunSpec]:
    """The proof runs of `tasks`: oracle (when the task has a [reference]) and nop."""
    specs = []
    for task in tasks:
        for agent in PROOF_AGENTS:
            if agent == ORACLE and task.reference is None:
                continue
            specs.append(RunSpec(id=proof_run_id(pipe, agent, task), agent=agent,
                                 tasks=(task.id,), timeout_s=timeout_s,
                                 source_name=proof_source(agent)))
    return specs


def proof_target(pipe, spec: RunSpec) -> Path:
    """The one run.json a proof run makes."""
    return pipe.layout.run_record(spec.id, spec.tasks[0], 0)
