#!/usr/bin/python3
"""Regenerate this task's instances (public examples and hidden judge instances).

Deterministic: only random.Random(seed).random() is used, whose sequence Python guarantees
across versions. The committed files are authoritative; rerun only to change the data
(and bump the task version). Usage: python3 gen_instances.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name, seed, n, kind): kinds as in Pisinger's classic families.
HIDDEN = [
    ("h00", 1001, 60, "uncorrelated"),
    ("h01", 1002, 90, "weakly"),
    ("h02", 1003, 120, "strongly"),
    ("h03", 1004, 150, "inverse"),
    ("h04", 1005, 80, "subset_sum"),
    ("h05", 1006, 140, "strongly"),
    ("h06", 1007, 110, "weakly"),
    ("h07", 1008, 150, "uncorrelated"),
    ("h08", 1009, 130, "subset_sum"),
    ("h09", 1010, 100, "inverse"),
]
EXAMPLES = [
    ("ex0", 7, 10, "uncorrelated"),
    ("ex1", 8, 40, "strongly"),
    ("ex2", 9, 70, "weakly"),
]


def randint(rng: random.Random, lo: int, hi: int) -> int:
    return lo + int(rng.random() * (hi - lo + 1))


def make(seed: int, n: int, kind: str) -> tuple[int, list[tuple[int, int]]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        w = randint(rng, 10, 200)
        if kind == "uncorrelated":
            v = randint(rng, 10, 200)
        elif kind == "weakly":
            v = max(1, w + randint(rng, -20, 20))
        elif kind == "strongly":
            v = w + 20
        elif kind == "inverse":
            v = randint(rng, 10, 200)
            w = v + 20
        else:  # subset_sum
            v = w
        items.append((w, v))
    capacity = sum(w for w, _ in items) * randint(rng, 30, 60) // 100
    return capacity, items


def optimum(capacity: int, items: list[tuple[int, int]]) -> int:
    best = [0] * (capacity + 1)
    for w, v in items:
        for c in range(capacity, w - 1, -1):
            if best[c - w] + v > best[c]:
                best[c] = best[c - w] + v
    return best[capacity]


def write(path: Path, capacity: int, items: list[tuple[int, int]]) -> None:
    lines = [f"{len(items)} {capacity}"] + [f"{w} {v}" for w, v in items]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    optima = {}
    for name, seed, n, kind in HIDDEN:
        cap, items = make(seed, n, kind)
        write(HERE / "judge" / "instances" / f"{name}.txt", cap, items)
        optima[name] = optimum(cap, items)
    (HERE / "judge" / "optima.json").write_text(json.dumps(optima, indent=1, sort_keys=True) + "\n")
    for name, seed, n, kind in EXAMPLES:
        cap, items = make(seed, n, kind)
        write(HERE / "environment" / "workspace" / "examples" / f"{name}.txt", cap, items)
        print(name, "optimum", optimum(cap, items))


if __name__ == "__main__":
    main()
