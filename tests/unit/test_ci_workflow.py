"""The CI workflow publishes what the report links to: the paths of the upload-artifact step
of .github/workflows/benchmark.yml cover every relative link of report.html and of its task
pages (resolved under results/<bench>/), so the published report has no broken link."""

from __future__ import annotations

import posixpath
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.helpers.paths import REPO
from tests.helpers.report_tables import make_tables, write

WORKFLOW = REPO / ".github" / "workflows" / "benchmark.yml"


def artifact_paths() -> tuple[str, list[str]]:
    """(results/<bench>/, the upload-artifact step's path patterns)."""
    flow = yaml.safe_load(WORKFLOW.read_text())
    bench = flow["env"]["SFORGE_BENCHMARK"]
    steps = [s for job in flow["jobs"].values() for s in job["steps"]
             if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert len(steps) == 1, f"{WORKFLOW}: expected one upload-artifact step"
    patterns = [p.strip() for p in steps[0]["with"]["path"].splitlines() if p.strip()]
    return f"results/{bench}/", patterns


def _regex(pattern: str) -> re.Pattern[str]:
    """An upload-artifact (actions/glob) pattern as a regex: `*` within a path segment, `**`
    any segments, a pattern ending in / everything under that folder."""
    if pattern.endswith("/"):
        pattern += "**"
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:[^/]+/)*", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def covered(path: str, patterns: list[str]) -> bool:
    """Whether a repository-relative file path is uploaded by one of the patterns (a `!`
    pattern excludes)."""
    hit = False
    for p in patterns:
        if p.startswith("!"):
            hit = hit and not _regex(p[1:]).fullmatch(path)
        elif _regex(p).fullmatch(path):
            hit = True
    return hit


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v for k, v in attrs if k in ("href", "src") and v]


def relative_targets(page: Path, root: Path) -> set[str]:
    """The files a page links to by relative URL, as paths relative to root."""
    parser = _Links()
    parser.feed(page.read_text())
    out = set()
    for href in parser.hrefs:
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or not parts.path:  # absolute, or #fragment only
            continue
        here = page.parent.relative_to(root).as_posix()
        target = posixpath.normpath(posixpath.join(here, unquote(parts.path)))
        assert not target.startswith(".."), f"{page.name} links out of the results: {href}"
        out.add(target)
    return out


def test_the_matcher_follows_upload_artifact_globs():
    pats = ["r/*.csv", "r/report/", "r/evals/**/*.json"]
    assert covered("r/best.csv", pats) and covered("r/report/a b.html", pats)
    assert covered("r/evals/t/k.json", pats) and covered("r/evals/t/u/k.json", pats)
    assert not covered("r/evals/t/k.log", pats) and not covered("r/sub/best.csv", pats)
    assert not covered("r/report.html", pats)
    assert not covered("r/best.csv", [*pats, "!r/best.csv"])


def test_the_artifact_covers_every_link_of_a_report(bench, tmp_path):
    prefix, patterns = artifact_paths()
    results = tmp_path / prefix
    layout = make_tables(bench, results, [
        ("run-a-0", "max_task", 150.0, True, 600.0),
        ("run-a-1", "max_task", 199.0, False, 900.0),
        ("run-a-1", "min_task", None, False, 700.0, "archive exceeds 10000 members"),
        ("odd name & co", "piece_task", 43623268300.0, True, None),
    ])
    write(bench, layout)
    pages = [layout.report, *sorted((results / "report").glob("*.html"))]
    assert len(pages) == 1 + len(bench.tasks) + 1  # the index, a page per task, runs.html
    targets = set().union(*(relative_targets(p, results) for p in pages))
    assert {"report.html", "leaderboard_repeats.csv", "report/max_task.html"} <= targets
    assert any(t.endswith(".json") for t in targets) and any(t.endswith(".log") for t in targets)
    for target in sorted(targets):
        assert (results / target).is_file(), f"a report links to a missing file: {target}"
        assert covered(prefix + target, patterns), \
            f"{WORKFLOW.name}: upload-artifact does not publish {prefix + target}"
    for page in pages:  # the pages themselves
        assert covered(prefix + page.relative_to(results).as_posix(), patterns)


@pytest.mark.parametrize("target", ["report.html", "report/max_task.html", "best.csv",
                                    "evals/max_task/abc.json", "evals/max_task/abc.log"])
def test_the_artifact_publishes_the_report_and_tables(target):
    prefix, patterns = artifact_paths()
    assert covered(prefix + target, patterns)
