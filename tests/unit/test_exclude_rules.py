"""`[submission] exclude`: the judge (sforge/grading/selection.py) and the sforge-submit helper
(helper/exclude.go) follow one rule, checked against one table of cases,
helper/testdata/exclude_rules.json."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sforge.benchmark.model import SubmissionRules
from sforge.grading.archive import filter_submission
from sforge.grading.selection import Selection
from tests.helpers.paths import REPO

HELPER = REPO / "helper"
CASES = json.loads((HELPER / "testdata" / "exclude_rules.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['pattern']!r}~{c['path']!r}" for c in CASES])
def test_judge_follows_the_exclude_table(tmp_path: Path, case: dict) -> None:
    """A one-file archive filtered with one exclude pattern keeps the file unless the table
    says the judge excludes it."""
    archive = tmp_path / "sub.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo(case["path"])
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    rules = SubmissionRules(exclude=(case["pattern"],))
    with filter_submission(archive, rules) as filtered:
        assert (case["path"] not in filtered.members) == case["excluded"], case["why"]


def random_cases(n: int, seed: int) -> list[dict]:
    """`n` random patterns and paths (glob characters, blanks, backslashes, slashes), each
    decided by the judge's own filter; a third or so of them excluded."""
    rng = random.Random(seed)

    def name() -> str:
        while (c := "".join(rng.choices("ab-!^[]\\*? ", k=rng.randint(1, 3)))) in (".", ".."):
            pass
        return c

    cases: list[dict] = []
    while len(cases) < n:
        pattern = "".join(rng.choices("ab-!^[]*?\\/ ", k=rng.randint(1, 7)))
        path = "/".join(name() for _ in range(rng.randint(1, 3)))
        excluded = Selection(SubmissionRules(exclude=(pattern,))).reason(path) is not None
        if excluded or rng.random() < 0.1:
            cases.append({"pattern": pattern, "path": path, "excluded": excluded})
    return cases


def test_helper_follows_the_exclude_table(tmp_path: Path) -> None:
    """`go test` in helper/ packs a workspace for every case of the table, and for random
    cases the judge decides here, and checks that the helper leaves out exactly what the
    judge does."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is missing (scripts/setup.sh installs golang-go): the helper's side "
                    "of the exclude table is not checked")
    extra = tmp_path / "cases.json"
    extra.write_text(json.dumps({"cases": random_cases(400, seed=1)}))
    env = {**os.environ, "CGO_ENABLED": "0", "SFORGE_EXCLUDE_CASES": str(extra),
           "GOCACHE": os.environ.get("GOCACHE", str(Path.home() / ".cache" / "go-build"))}
    proc = subprocess.run([go, "test", "-count=1", "-run", "^TestExcludeRules$", "."],
                          cwd=HELPER, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
