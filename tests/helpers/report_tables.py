"""Results folders and reports built for the report tests: result files, judge logs and the
four CSVs from rows, the report over them, and one sample with invalid, refused and
hostile-named submissions."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sforge import scores
from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Benchmark
from sforge.benchmark.submissions import Submission
from sforge.grading.results import EvalResult
from sforge.report import pages as report

EVIL = '<script>alert("x")</script>&co'
TOO_BIG = "archive exceeds 10000 members"


def make_tables(bench: Benchmark, root: Path, rows: list[tuple],
                names: list[str] | None = None) -> Layout:
    """rows: (source, task, score, valid, elapsed_s[, reason]) → result files, judge logs and
    the four CSVs in one results folder, as the rules make them; submission i is named
    names[i] (default s<i>)."""
    layout = Layout(root)
    records = []
    for i, (source, task, score, valid, elapsed, *rest) in enumerate(rows):
        sha = hashlib.sha256(f"{i}".encode()).hexdigest()
        key = sha[:20]
        path = layout.eval_result(task, key)
        records.append((Submission(source=source, task=task,
                                   name=names[i] if names else f"s{i}", path=root / "x",
                                   sha256=sha, elapsed_s=elapsed, agent="agent"), path))
        if path.exists():  # as in a real results folder: a result, once written, stays
            continue
        EvalResult(task=task, submission=sha, key=key, valid=valid, score=score,
                   summary=f"summary of s{i}", reason=rest[0] if rest else None,
                   details=[{"name": f"case_{i}_a", "status": "PASSED", "score": 1},
                            {"name": f"case_{i}_b", "status": "FAILED", "score": 0,
                             "message": f"expected {i}, got {i + 1}"}],
                   metrics={"peak_mb": 10.0 + i},
                   finished_at=f"2025-01-01T00:{i % 60:02d}:00+00:00").write(path)
        layout.eval_log(task, key).write_text(f"judge log of s{i}\n")
    scores.write_scores(bench, records, layout.scores)
    scores.write_best(bench, layout.scores, layout.best)
    scores.write_leaderboard(bench, layout.best, layout.scores, layout.leaderboard,
                             layout.leaderboard_md, layout.budgets, [1, 2])
    return layout


def write(bench: Benchmark, layout: Layout, **kw) -> str:  # type: ignore[no-untyped-def]
    """Write the report of the tables in layout; returns report.html's text."""
    report.write_report(bench, layout.scores, layout.best, layout.leaderboard, layout.budgets,
                        layout.report, **kw)
    return layout.report.read_text()


def task_page(layout: Layout, task: str) -> str:
    """The text of one task's page of the report."""
    return (layout.root / "report" / f"{task}.html").read_text()


SAMPLE = [
    ("alpha", "max_task", 100.0, True, 1800.0),
    ("alpha", "max_task", 150.0, True, 5400.0),
    ("alpha", "max_task", 199.0, False, 6000.0),  # the grader said invalid
    ("alpha", "min_task", 40.0, True, 600.0),
    ("alpha", "piece_task", 43623268300.0, True, 3000.0),
    ("alpha", "norescale_task", 3.0, True, 100.0),
    ("beta", "max_task", 60.0, True, 900.0),
    ("beta", "min_task", 90.0, True, 700.0),
    ("beta", "min_task", 70.0, True, 7000.0),
    ("beta", "min_task", None, False, 7100.0, TOO_BIG),  # sforge refused it
    (EVIL, "max_task", 10.0, True, None),
]


def sample_report(bench: Benchmark, root: Path) -> Layout:
    """The report of SAMPLE in a results folder at root."""
    layout = make_tables(bench, root, SAMPLE)
    write(bench, layout)
    return layout
