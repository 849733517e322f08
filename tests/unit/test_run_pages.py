"""The report's runs pages: runs.html (one row per run × task × repeat, as `sforge runs`
reads them), a page per run with its rounds and its transcript, escaped and rendered again
only when its folder changed (in a browser: tests/integration/test_runs_pages_browser.py)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sforge.cli import runs as cli_runs
from sforge.report import run_pages
from sforge.report.pages import environment
from sforge.report.run_pages import update_run_pages
from sforge.report.transcript import read_transcript
from sforge.scores.run_listing import list_runs
from tests.helpers.run_folders import HOSTILE, make_runs


class _Tags(HTMLParser):
    """Every tag a browser's tokenizer sees, with the stack of open <details> checked."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.open_details = 0
        self.max_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "details":
            self.open_details += 1
            self.max_depth = max(self.max_depth, self.open_details)

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self.open_details -= 1
            assert self.open_details >= 0, "a </details> closes more than was opened"


def _tags(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "results" / "minibench"
    make_runs(root)
    return root


def test_the_cli_and_the_report_read_runs_the_same_way(root):
    assert cli_runs.list_runs is list_runs
    rows = {(r["run"], r["task"], r["repeat"]): r for r in list_runs(root)}
    assert {k: r["state"] for k, r in rows.items()} == {
        ("r1", "min_task", 1): "done", ("r1", "min_task", 2): "failed",
        ("r1", "other_task", 1): "interrupted", ("r2", "min_task", 1): "running"}
    done = rows[("r1", "min_task", 1)]
    assert (done["best"], done["rounds"], done["tokens_in"], done["tokens_out"],
            done["cost_usd"], done["model"]) == (4.0, 2, 420, 34, 0.0123, "claude-x")
    assert rows[("r1", "min_task", 2)]["error"].startswith("model API: 401")
    assert [r["run"] for r in list_runs(root, "r2")] == ["r2"]


def test_runs_page_has_a_row_per_run_linking_its_page(root):
    written = update_run_pages(root, "minibench", environment)
    pages = root / "report"
    index = (pages / "runs.html").read_text()
    assert written[0] == pages / "runs.html" and len(written) == 5
    assert index.count('<tr class="run-row">') == 4
    for link in re.findall(r'<a href="(runs/[^"]+)">', index):
        assert (pages / link).is_file(), link
    for state in ("done", "failed", "interrupted", "running"):
        assert f'state-{state}">{state}</td>' in index
    assert "<td>0.0123</td>" in index and "<td>321.5</td>" in index
    assert HOSTILE not in index and "&lt;script&gt;alert(" in index
    assert _tags(index).tags.count("script") == 1  # the table sorting's only


def test_run_page_shows_rounds_with_failed_details_and_the_transcript_escaped(root):
    update_run_pages(root, "minibench", environment)
    page = (root / "report" / "runs" / "r1" / "min_task-1.html").read_text()
    tags = _tags(page)
    assert tags.open_details == 0  # every <details> closed by its own </details>
    assert tags.tags.count("script") == 2  # the page's own: search and table sorting
    assert "b" not in tags.tags and HOSTILE not in page
    assert page.count("&lt;/details&gt;") >= 5
    # rounds: the failed test of round 1 with its message, round 2's reason
    assert "1 of 2 test(s) not passed" in page and "case_wrong" in page
    assert "case_ok" not in page
    assert 'href="../../../evals/min_task/' + "a" * 16 + '.json"' in page
    assert "judge timed out &lt;script&gt;" in page
    # the transcript: 4 calls, each message once (a request repeats the conversation)
    assert page.count('<details class="call"') == 4
    assert page.count("Solve the task.") == 2  # its summary preview and its text
    assert page.count("You are an agent") == 2  # the system prompt, once for calls 1–3
    assert page.count("Same system prompt as the call before.") == 2
    assert page.count("needle-in-output") == 2
    assert "streamed answer" in page and "&#34;final&#34;: true" in page
    assert "shell" in page and 'id="search"' in page
    for link in re.findall(r'href="(\.\./\.\./\.\./[^"#]+)"', page):
        target = (root / "report" / "runs" / "r1" / link).resolve()
        assert target.is_file() or target.name == "report.html", link


def test_a_failed_run_page_says_why_and_has_no_transcript(root):
    update_run_pages(root, "minibench", environment)
    page = (root / "report" / "runs" / "r1" / "min_task-2.html").read_text()
    assert 'id="run-error">model API: 401 invalid x-api-key &lt;script&gt;' in page
    assert 'id="no-transcript"' in page and 'id="no-rounds"' in page


def test_only_runs_whose_folder_changed_are_rendered_again(root, monkeypatch):
    first = update_run_pages(root, "minibench", environment)
    assert len(first) == 5
    # r2 is running: its elapsed time moves, so the runs table is made again, but no
    # run page of an unchanged folder
    second = update_run_pages(root, "minibench", environment)
    assert all(p.name == "runs.html" for p in second)
    (root / "runs" / "r2").rename(root / "gone-r2")
    (root / "runs" / "r1" / "min_task" / "1" / "agent.log").write_text("more output\n")
    rendered: list[str] = []
    from sforge.report import run_render

    real = run_render.write_run_page
    monkeypatch.setattr(run_render, "write_run_page",
                        lambda e, r, b, f, out: rendered.append(out.name) or real(e, r, b, f, out))
    third = update_run_pages(root, "minibench", environment)
    assert rendered == ["min_task-1.html"]
    assert [p.name for p in third] == ["runs.html", "min_task-1.html"]
    assert not (root / "report" / "runs" / "r2" / "min_task-1.html").exists()
    # nothing running, nothing changed
    assert update_run_pages(root, "minibench", environment) == []
    # a page removed by hand is made again; a state file of another version is not taken
    (root / "report" / "runs" / "r1" / "min_task-2.html").unlink()
    assert [p.name for p in update_run_pages(root, "minibench", environment)] == ["min_task-2.html"]
    state = run_pages.runs_state_path(root)
    state.write_text(json.dumps({"version": "0", "pages": {}, "index": ""}))
    assert len(update_run_pages(root, "minibench", environment)) == 4


def test_no_runs_gives_a_page_saying_so(tmp_path):
    root = tmp_path / "results" / "b"
    written = update_run_pages(root, "b", environment)
    assert [p.name for p in written] == ["runs.html"]
    assert 'id="no-runs"' in written[0].read_text()
    assert update_run_pages(root, "b", environment) == []


def test_transcript_lines_that_are_not_calls_and_the_page_cap(tmp_path):
    path = tmp_path / "transcript.jsonl"
    big = "x" * 50_000
    lines = [json.dumps({"request": {"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": big}]},
        {"type": "function_call", "name": "exec", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"}]},
        "response": [{"type": "response.completed", "response": {"output": [
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "all done"}]}]}}]}),
        json.dumps({"request": {"instructions": "be codex", "input": "hi"}, "response": [
            {"type": "response.output_item.done", "item": {
                "type": "function_call", "name": "exec_command", "arguments": "{\"cmd\": 1}"}},
            {"type": "response.completed", "response": {"output": []}}]}),
        "not json at all",
        json.dumps({"at": "t", "status": 200, "bodies": "omitted: the transcript is at its cap"}),
        json.dumps([1, 2])]
    path.write_text("\n".join(lines) + "\n")
    calls = read_transcript(path).calls
    assert len(calls) == 5
    kinds = [(i.kind, i.title) for i in calls[0].items]
    assert kinds == [("user", "user"), ("tool-call", "exec"), ("tool-result", "c1")]
    assert "30000 more characters" in calls[0].items[0].text
    assert [i.text for i in calls[0].reply] == ["all done"]
    # a responses stream whose completed event has no output: the items as they finished
    assert [(i.kind, i.text) for i in calls[1].items] == [("system", "be codex"),
                                                         ("user", "hi")]
    assert [(i.kind, i.title, i.text) for i in calls[1].reply] == [
        ("tool-call", "exec_command", '{"cmd": 1}')]
    assert "line 3 is not JSON" in (calls[2].note or "")
    assert "omitted" in (calls[3].note or "") and "not a JSON object" in (calls[4].note or "")
    cut = read_transcript(path, max_chars=100)
    assert cut.truncated and len(cut.calls) == 1


def _attempt(folder: Path, n: int, **fields) -> None:
    (folder / f"attempt-{n}.json").write_text(json.dumps({"attempt": n, **fields}))


def test_the_earlier_attempts_are_counted_without_the_current_one(root):
    done = root / "runs" / "r1" / "min_task" / "1"
    _attempt(done, 1, state="done")  # done on its first try: no earlier attempt
    update_run_pages(root, "minibench", environment)
    page = (root / "report" / "runs" / "r1" / "min_task-1.html").read_text()
    assert "earlier attempt" not in page
    _attempt(done, 2, state="done")  # done on its second try: one earlier
    interrupted = root / "runs" / "r1" / "other_task" / "1"
    _attempt(interrupted, 2, state="interrupted")  # the latest of two interrupted ones
    update_run_pages(root, "minibench", environment)
    page = (root / "report" / "runs" / "r1" / "min_task-1.html").read_text()
    assert "(1 earlier attempt(s) recorded)" in page
    page = (root / "report" / "runs" / "r1" / "other_task-1.html").read_text()
    assert "(1 earlier attempt(s) recorded)" in page


def test_why_a_run_stopped_is_a_column_of_runs_html_and_the_runs_table(root, tmp_path):
    for n, why in ((1, "timeout"), (2, "cancelled")):
        folder = root / "runs" / "r3" / "min_task" / str(n)
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"state": "done", "stopped_by": why}))
    update_run_pages(root, "minibench", environment)
    index = (root / "report" / "runs.html").read_text()
    assert '<th class="text">stopped by</th>' in index
    for why in ("agent", "timeout", "cancelled"):
        assert f'<td class="text stopped-by">{why}</td>' in index
    # `sforge runs`: the column beside the state, from the same rows
    row = list_runs(root, "r3")[0]
    assert list(row)[list(row).index("state") + 1] == "stopped_by"


def test_the_agents_exit_code_is_a_column_of_runs_html_and_the_runs_table(root):
    """A done run whose agent exited nonzero says so beside why it stopped: in `sforge runs`
    (table and --json, the same rows) and in runs.html, right after "stopped by"."""
    folder = root / "runs" / "r4" / "min_task" / "1"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"state": "done", "stopped_by": "agent",
                                                 "exit_code": 7, "error": None}))
    [row] = list_runs(root, "r4")
    assert row["exit_code"] == 7
    assert list(row)[list(row).index("stopped_by") + 1] == "exit_code"
    update_run_pages(root, "minibench", environment)
    index = (root / "report" / "runs.html").read_text()
    assert re.search(r'<th class="text">stopped by</th>\s*<th>exit</th>', index), index
    assert re.search(r'<td class="text stopped-by">agent</td>\s*<td class="exit">7</td>',
                     index), index


def test_earlier_attempts_logs_are_linked_from_the_run_page(root):
    folder = root / "runs" / "r1" / "min_task" / "1"
    (folder / "agent-attempt-1.log").write_text("first try\n")
    (folder / "agent-attempt-2.log").write_text("second try\n")
    update_run_pages(root, "minibench", environment)
    page = (root / "report" / "runs" / "r1" / "min_task-1.html").read_text()
    links = re.findall(r'<a href="\.\./\.\./\.\./runs/r1/min_task/1/([^"]+)">', page)
    assert links.index("agent.log") < links.index("agent-attempt-1.log") \
        < links.index("agent-attempt-2.log")
