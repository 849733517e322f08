"""What the report says of how results were made: each task's proofs (the oracle gets full
marks, the no-op stays at the floor: sforge.scores.proofs) on the task table and the task
page, and per source whether its results of each task were graded under one judge image
(results carry the image id the judge tag resolved to) or under several."""

from __future__ import annotations

from typing import Any

from sforge.benchmark.model import Benchmark
from sforge.report.views import Cell
from sforge.scores.proofs import Proof, proof_badge

BAD = "background-color:#fbe3e3"
GOOD = "background-color:#e3f4e3"


def proof_cell(proofs: dict[str, Proof]) -> Cell:
    """A task's proofs as one cell of the task table: red when its oracle fails or its no-op
    pays, the reasons on hover."""
    text, why, bad = proof_badge(proofs)
    style = BAD if bad else GOOD if text == "proven" else ""
    return Cell(text or "—", text or "~", style, title=why if text else f"not proven: {why}")


def proof_fact(proofs: dict[str, Proof]) -> tuple[str, str]:
    """A task's proofs as a line of the task page's facts."""
    text, why, bad = proof_badge(proofs)
    return ("proofs", f"{'⚠ ' if bad else ''}{text or 'not proven'} — {why}")


def add_proof_column(bench: Benchmark, header: list[str], rows: list[list[Cell]],
                     proofs: dict[str, dict[str, Proof]], at: int) -> None:
    """Insert the proofs column at `at` into the task table (rows in the benchmark's order)."""
    header.insert(at, "proofs")
    for task, row in zip(bench.tasks.values(), rows, strict=True):
        row.insert(at, proof_cell(proofs.get(task.id, {})))


def mixed_sources(entries: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """source → the tasks whose results of that source were graded under more than one
    judge image (sforge.scores.parts.mixed_judges of each task's index entry)."""
    out: dict[str, list[str]] = {}
    for task, entry in sorted(entries.items()):
        for source in entry.get("mixed_judges") or {}:
            out.setdefault(source, []).append(task)
    return out


def judge_images_cell(source: str, mixed: dict[str, list[str]]) -> Cell:
    """Whether `source` was graded under one judge image per task; red with the tasks if not."""
    tasks = mixed.get(source, [])
    if not tasks:
        return Cell("one per task", "0", title="every task's results of this source were "
                    "graded under one judge image")
    return Cell(f"mixed ({len(tasks)} task{'s' if len(tasks) > 1 else ''})", str(len(tasks)),
                BAD, title="graded under more than one judge image: " + ", ".join(tasks))


def add_judge_column(board: Any, header: list[str], rows: list[list[Cell]],
                     entries: dict[str, dict[str, Any]]) -> None:
    """Append the judge-images column to the leaderboard (rows in the board's order)."""
    mixed = mixed_sources(entries)
    header.append("judge images")
    for source, row in zip(board["source"].tolist(), rows, strict=True):
        row.append(judge_images_cell(source, mixed))
