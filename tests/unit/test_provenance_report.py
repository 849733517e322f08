"""What the report says of how results were made: a source graded under several judge images
of one task is flagged (results built by hand with their image ids), and each task's proofs
(oracle and no-op run records) are judged by the integrity check's floor and full-marks
rules and shown on the task table and the task page; the oracle agent needs a [reference]."""

from __future__ import annotations

import hashlib
import html
import json
import re
from pathlib import Path

from sforge import scores
from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Benchmark
from sforge.benchmark.submissions import Submission
from sforge.core.fileio import atomic_write_json
from sforge.grading.results import EvalResult
from sforge.scores.parts import mixed_judges
from sforge.scores.proofs import judge_proof, read_proofs
from tests.helpers.cli import sforge
from tests.helpers.paths import FIXTURES
from tests.helpers.report_tables import task_page, write

ID_A, ID_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def graded(bench: Benchmark, root: Path, rows: list[tuple[str, str, float, str]]) -> Layout:
    """rows: (source, task, score, judge image id; "" = a result from before the field)."""
    layout = Layout(root)
    records = []
    for i, (source, task, score, image_id) in enumerate(rows):
        sha = hashlib.sha256(f"{i}".encode()).hexdigest()
        path = layout.eval_result(task, sha[:20])
        records.append((Submission(source=source, task=task, name=f"s{i}", path=root / "x",
                                   sha256=sha), path))
        data = EvalResult(task=task, submission=sha, key=sha[:20], valid=True, score=score,
                          summary="", judge_image=f"b.judge.{task}:1",
                          judge_image_id=image_id).to_dict()
        if not image_id:  # an old result: written without the provenance fields at all
            for field in ("judge_image_id", "grading_contract", "host"):
                del data[field]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    scores.write_scores(bench, records, layout.scores)
    scores.write_best(bench, layout.scores, layout.best)
    scores.write_leaderboard(bench, layout.best, layout.scores, layout.leaderboard,
                             layout.leaderboard_md, layout.budgets, [1])
    return layout


def row_of(page: str, table: str, first: str) -> str:
    """The <tr> of table `table` whose cells include `first`."""
    body = page.split(f'id="{table}"', 1)[1].split("<tbody>", 1)[1].split("</table>", 1)[0]
    return next(r for r in body.split("<tr")[1:] if html.escape(first) in r)


def test_mixed_judges_names_only_sources_with_two_ids():
    got = mixed_judges(["a", "a", "b", "b", "c"], [ID_A, ID_B, ID_A, ID_A, None])
    assert got == {"a": [ID_A, ID_B]}
    assert mixed_judges(["a", "a"], ["", ID_A]) == {}  # an old result says nothing


def test_a_source_graded_under_two_judge_images_is_flagged(bench, tmp_path):
    layout = graded(bench, tmp_path / "r", [
        ("alpha", "max_task", 100.0, ID_A), ("alpha", "max_task", 150.0, ID_B),
        ("alpha", "min_task", 40.0, ID_A),
        ("beta", "max_task", 60.0, ID_A), ("beta", "max_task", 70.0, ID_A),
        ("gamma", "max_task", 10.0, ""), ("gamma", "max_task", 20.0, ID_B),
    ])
    csv = layout.scores.read_text()
    assert "judge_image_id" in csv.splitlines()[0] and ID_B in csv
    page = write(bench, layout)
    alpha = row_of(page, "leaderboard-table", "alpha")
    assert "mixed (1 task)" in alpha and "max_task" in alpha and "#fbe3e3" in alpha
    for source in ("beta", "gamma"):
        assert "one per task" in row_of(page, "leaderboard-table", source)


def proof_record(root: Path, agent: str, task: str, score: float | None, rescaled: float | None,
                 ended: str = "2026-01-01T00:00:00+00:00", run: str = "") -> None:
    run = run or f"{agent}-{hashlib.sha256(ended.encode()).hexdigest()[:8]}"
    atomic_write_json(Layout(root).run_record(run, task, 0), {
        "run": run, "task": task, "repeat": 0, "agent": agent, "best_score": score,
        "best_rescaled": rescaled, "ended_at": ended, "state": "done"})


def test_proofs_are_judged_by_the_integrity_rules(bench):
    task = bench.tasks["max_task"]  # linear 0..200
    assert judge_proof(task, "oracle", {"best_score": 200.0})[0] is True
    assert judge_proof(task, "oracle", {"best_score": 199.0})[0] is False
    assert judge_proof(task, "oracle", {"best_score": None})[0] is False
    assert judge_proof(task, "nop", {"best_score": 0.0})[0] is True
    assert judge_proof(task, "nop", {"best_score": 1.0})[0] is False
    assert judge_proof(task, "nop", {"best_score": None})[0] is True  # invalid pays nothing
    # no rescale table: maximized, a raw score above 0 pays; the oracle needs only validity
    assert judge_proof(bench.tasks["norescale_task"], "nop", {"best_score": 3.0})[0] is False
    assert judge_proof(bench.tasks["norescale_task"], "oracle", {"best_score": 3.0})[0]


def test_report_marks_a_failing_oracle_and_a_paying_noop(bench, tmp_path):
    root = tmp_path / "r"
    layout = graded(bench, root, [("alpha", "max_task", 100.0, ID_A),
                                  ("alpha", "min_task", 40.0, ID_A)])
    proof_record(root, "oracle", "max_task", 200.0, 100.0)
    proof_record(root, "nop", "max_task", 0.0, 0.0)
    # min_task is minimized, 100 → 0 and 20 → 100
    proof_record(root, "oracle", "min_task", 50.0, 62.5)  # not full marks
    proof_record(root, "nop", "min_task", 90.0, 12.5)     # pays for nothing
    # an older, passing proof of min_task does not hide the newer failing one
    proof_record(root, "oracle", "min_task", 20.0, 100.0, ended="2025-01-01T00:00:00+00:00")
    proofs = read_proofs(bench, root)
    assert proofs["min_task"]["oracle"].ok is False and proofs["max_task"]["oracle"].ok
    page = write(bench, layout)
    assert "<th>proofs</th>" in page.split('id="task-table"', 1)[1].split("</tr>", 1)[0] \
        or '<th class="text">proofs</th>' in page
    bad = row_of(page, "task-table", "min_task")
    assert "oracle fails, no-op pays" in bad and "#fbe3e3" in bad
    assert re.search(r">proven<", row_of(page, "task-table", "max_task"))
    assert "not proven" in row_of(page, "task-table", "piece_task")
    unproven = task_page(layout, "piece_task")
    assert "not proven — run sforge prove" in unproven  # said once, with what to do
    assert unproven.count("not proven") == 1
    assert "oracle fails: not full marks" in task_page(layout, "min_task")
    # a newer proof (the task fixed) re-renders its cached task page
    proof_record(root, "oracle", "min_task", 20.0, 100.0, ended="2027-01-01T00:00:00+00:00")
    proof_record(root, "nop", "min_task", 100.0, 0.0, ended="2027-01-01T00:00:00+00:00")
    write(bench, layout)
    assert "proven —" in task_page(layout, "min_task")


def test_an_old_result_without_provenance_still_loads(tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"task": "t", "submission": "ab", "key": "k", "valid": True,
                                "score": 1.0, "summary": "", "judge_image": "b.judge.t:1"}))
    old = EvalResult.read(path)
    assert (old.judge_image_id, old.grading_contract, old.host) == ("", None, "")
    new = EvalResult(task="t", submission="ab", key="k", valid=True, score=1.0, summary="",
                     judge_image_id=ID_A, grading_contract=1, host="node1")
    assert EvalResult.from_dict(json.loads(json.dumps(new.sanitised().to_dict()))) == new


def test_the_oracle_refuses_a_task_without_reference(tmp_path):
    proc = sforge("-b", str(FIXTURES / "scores_bench"), "--results", str(tmp_path / "r"),
                  "run", "--agent", "oracle", "--task", "max_task")
    assert proc.returncode == 3  # an input error
    assert "max_task/task.toml: [reference]" in proc.stderr and "script =" in proc.stderr
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").rglob("spec.json"))
