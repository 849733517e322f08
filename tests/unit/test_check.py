"""Unit: `sforge check` rules (no Docker).

Each directory under fixtures/check/ is one small benchmark, valid except for one defect;
its expected.toml names the rule that must fire, the file and line it must name and part
of the message. Nothing else may fire, so every rule is also tested for false positives
on the otherwise valid benchmark. `_clean` is that valid benchmark: no findings at all.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from sforge.check import (
    Finding,
    check_benchmark,
    format_findings,
    has_errors,
    parse_dockerfile,
    simple_commands,
    tokenize_shell,
    toml_lines,
)
from tests.helpers import paths
from tests.helpers.paths import REPO

FIXTURES = paths.FIXTURES / "check"
CASES = sorted(d for d in FIXTURES.iterdir() if (d / "expected.toml").is_file())


def _expected(case: Path) -> dict:
    with (case / "expected.toml").open("rb") as fh:
        return tomllib.load(fh)


def _materialise(case: Path, tmp_path: Path, want: dict) -> Path:
    """A copy of the fixture, with the large files and the git work tree it asks for."""
    root = tmp_path / case.name
    shutil.copytree(case, root, ignore=shutil.ignore_patterns("expected.toml"))
    for item in want.get("sparse", []):
        path = root / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            fh.truncate(item["size"])
    if want.get("git"):
        if shutil.which("git") is None:
            pytest.skip("git is not installed")
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_fixtures_cover_every_rule():
    """Each rule that check_benchmark can report has a fixture that makes it fire."""
    rules = {_expected(c)["rule"] for c in CASES} - {""}
    assert rules >= {
        "definition", "from-unpinned", "apt-unpinned", "pip-unpinned", "build-context",
        "base-image", "add-url", "file-too-large", "task-too-large", "blob-not-ignored",
        "blob-unused", "notes-missing", "notes-section", "instruction-missing",
        "status-missing", "status-unknown", "category-missing", "version-missing",
        "version-format", "judge-image", "judge-runs-cwd", "judge-overlay", "rescale-missing",
    }
    assert {d.name for d in FIXTURES.iterdir() if d.is_dir()} == {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture(case: Path, tmp_path: Path):
    want = _expected(case)
    root = _materialise(case, tmp_path, want)
    findings = check_benchmark(root)
    if not want["rule"]:
        assert findings == [], format_findings(findings)
        return
    assert findings, f"{want['rule']} did not fire"
    others = [f for f in findings if f.rule != want["rule"]]
    assert not others, "other rules fired:\n" + format_findings(others)
    file = root / want["file"]
    match = [f for f in findings if f.file == file and f.line == want.get("line")]
    assert match, (f"expected {want['rule']} at {want['file']}:{want.get('line')}, got:\n"
                   + format_findings(findings))
    assert all(f.severity == want.get("severity", "error") for f in match)
    assert any(want.get("message", "") in f.message for f in match), format_findings(match)
    assert has_errors(findings) is (want.get("severity", "error") == "error")


def test_edgebench_is_clean():
    """The bundled benchmark obeys its own rules (in this repository's git work tree, so the
    blob paths are checked against the real .gitignore)."""
    findings = check_benchmark(REPO / "edgebench")
    assert findings == [], format_findings(findings)


def test_format_findings():
    findings = [
        Finding(Path("tasks/t/task.toml"), 5, "status-unknown", "status 'live' is not one of …"),
        Finding(Path("tasks/t/NOTES.md"), None, "notes-missing", "missing"),
        Finding(Path("tasks/t/task.toml"), 26, "blob-unused", "not ADDed", "warning"),
    ]
    assert format_findings(findings).splitlines() == [
        "tasks/t/task.toml:5: status-unknown: status 'live' is not one of …",
        "tasks/t/NOTES.md: notes-missing: missing",
        "tasks/t/task.toml:26: blob-unused: not ADDed (warning)",
    ]
    assert format_findings([]) == ""


def test_benchmark_level_error(tmp_path: Path):
    """No benchmark.toml: one definition finding, no crash."""
    (tmp_path / "tasks").mkdir()
    findings = check_benchmark(tmp_path)
    assert [(f.rule, f.file) for f in findings] == [("definition", tmp_path / "benchmark.toml")]


def test_dockerfile_continuations_and_comments():
    text = "FROM x:1\n# c\nRUN a \\\n  # inner comment\n  b \\\n\n  c\nENV A=1\n"
    ins = parse_dockerfile(text)
    assert [(i.keyword, i.line) for i in ins] == [("FROM", 1), ("RUN", 3), ("ENV", 8)]
    assert [no for no, _ in ins[1].pieces] == [3, 5, 7]


def test_shell_tokens_keep_lines_and_drop_redirections():
    pieces = [(1, "apt-get install -y 'a b' c=1 >/dev/null 2>&1 &&"), (2, "  echo \"$(x y)\"")]
    cmds = [[(t.text, t.line) for t in c] for c in simple_commands(tokenize_shell(pieces))]
    assert cmds == [[("apt-get", 1), ("install", 1), ("-y", 1), ("a b", 1), ("c=1", 1)],
                    [("echo", 2), ("$(x y)", 2)]]


def test_toml_lines():
    text = ('id = "t"\n[judge]\ncmd = "x"\n[score]\nrescale = { kind = "linear" }\n'
            'paths = [\n  "a = b",\n]\n[[blobs]]\npath = "p"\n[[blobs]]\npath = "q"\n')
    lines = toml_lines(text)
    assert lines["id"] == 1 and lines["judge"] == 2 and lines["judge.cmd"] == 3
    assert lines["score.rescale"] == 5
    assert "score.a" not in lines  # inside a multi-line array
    assert lines["blobs[0].path"] == 10 and lines["blobs[1].path"] == 12


@pytest.mark.parametrize("line, pinned", [
    ("RUN apt-get install -y curl=7.88.1-10+deb12u5", True),
    ("RUN apt-get -y -o Dpkg::Options::=--force-confnew install curl=1", True),
    ("RUN apt-get install -y ./local.deb", True),
    ("RUN apt-get install -y curl", False),
    ("RUN apt install -t bookworm-backports curl/bookworm-backports", False),
    ("RUN echo apt-get install curl", True),
    ("RUN pip install 'numpy==1.26.4' 'x[y]==2; python_version<\"4\"'", True),
    ("RUN pip install . -e /src /w/a.whl git+https://h/r.git@0123abc", True),
    ("RUN pip install --upgrade pip", False),
    ("RUN python3 -m pip install numpy", False),
    ("RUN pip download numpy", True),
    ('RUN ["/bin/sh", "-c", "pip install flask"]', False),
    ("ARG V=1.0\nRUN pip install foo==$V", True),
])
def test_pinning(tmp_path: Path, line: str, pinned: bool):
    from sforge.check import CheckContext, check_dockerfile

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM debian:12\n{line}\n")
    found = [f.rule for f in check_dockerfile(dockerfile, CheckContext(tmp_path, None)).findings]
    assert (found == []) is pinned, found


@pytest.mark.parametrize("text, refs", [
    ("FROM a.judge.t:1 AS x\nCOPY --from=x /a /b\n", [(1, "FROM", "a.judge.t:1")]),
    ("ARG J=b.judge.t\nFROM busybox:1\nCOPY --from=$J /x /y\n",
     [(2, "FROM", "busybox:1"), (3, "COPY --from", "b.judge.t")]),
    ("FROM scratch\nCOPY --from=0 /a /b\nCOPY [\"--from=q.judge.t@sha256:ab\", \"/a\", \"/b\"]\n",
     []),
    ("FROM busybox:1\nRUN --mount=type=cache,target=/c --mount=type=bind,from=c.judge.t,"
     "target=/j true\n", [(1, "FROM", "busybox:1"), (2, "RUN --mount from=", "c.judge.t")]),
])
def test_image_uses(text: str, refs: list) -> None:
    from sforge.benchmark.dockerfile import image_uses

    assert [(u.line, u.how, u.ref) for u in image_uses(parse_dockerfile(text))] == refs


@pytest.mark.parametrize("ref, judge", [
    ("bench.judge.task:0123456789ab", True), ("reg:5000/x/bench.judge.t", True),
    ("bench.judge.t@sha256:00ff", True), ("BENCH.JUDGE.T:1", True),
    ("bench.work.task:1", False), ("judge:1", False), ("python:3.11", False),
    ("myjudge.example/img:1", False),
])
def test_judge_image_names(ref: str, judge: bool) -> None:
    from sforge.benchmark.dockerfile import JUDGE_IMAGE

    assert bool(JUDGE_IMAGE.match(ref)) is judge


@pytest.mark.parametrize("cmd, risky", [
    ("/usr/bin/python3 /judge/grade.py", False),
    ("python3 -m compileall -q . && python3 /judge/grade.py", True),
    ("python3 -Im pytest /judge/tests", True),
    ("python3 -c 'import grader'", True),
    ("./run_tests.sh", True),
    ("bin/grade", True),
    ("sh grade.sh", True),
    ("cd /judge && sh /judge/run.sh", False),
    ("make test", True),
    ("pytest -q /judge/tests", True),
    ("FOO=1 exec /judge/grade", False),
])
def test_judge_cmd_risks(cmd: str, risky: bool) -> None:
    from sforge.check.judge_safety import _cmd_risks

    assert bool(_cmd_risks(cmd)) is risky, _cmd_risks(cmd)


@pytest.mark.parametrize(("exclude", "warned"), [
    ([], True), (["tests"], False), (["other"], True),
    # the file itself excluded: a member `tests` (a link to mine/, or a plain file) cannot
    # replace its folder either (test_judge: test_a_member_never_replaces_an_image_folder)
    (["*.txt"], False), (["tests/expected.txt"], False), (["tests/*.txt"], False)])
def test_an_excluded_grader_file_is_no_overlay(tmp_path: Path, exclude: list, warned: bool):
    """A judge file copied into cwd that `[submission] exclude` keeps out of every archive
    cannot be replaced by one: no judge-overlay warning (the rule is the judge's own, and
    extraction never puts a member over a folder of the image)."""
    from sforge.benchmark.loader import load_benchmark
    from sforge.check.judge_safety import judge_risks

    root = tmp_path / "b"
    shutil.copytree(FIXTURES / "judge-overlay", root)
    (root / "expected.toml").unlink()
    toml = root / "tasks" / "t" / "task.toml"
    toml.write_text(toml.read_text().replace('cwd = "/"', 'cwd = "/home/workspace/t"').replace(
        'paths = ["."]', f'paths = ["."]\nexclude = {exclude!r}'.replace("'", '"')))
    (root / "tasks" / "t" / "judge" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY judge/grade.py /judge/\n"
        "COPY judge/grade.py /home/workspace/t/tests/expected.txt\n")
    task = load_benchmark(root).tasks["t"]
    rules = [f.rule for f in judge_risks(task)]
    assert rules == (["judge-overlay"] if warned else []), judge_risks(task)
