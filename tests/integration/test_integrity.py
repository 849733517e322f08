"""`sforge check --integrity` with real images and judges (Docker), plus its parts.

Each directory under tests/fixtures/integrity/ is one benchmark of one task showing one behaviour
(clean, leaky, pays_nothing, broken_oracle, gullible); its expected.toml lists the
integrity-* rules that must fire, and nothing else of that family may.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest

from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import SubmissionRules
from sforge.check.leaks import scan_image
from sforge.check.probes import probes, workspace_archive
from sforge.grading.archive import ArchiveError, ArchiveLimits, filter_submission
from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.git_images import git, make_repo
from tests.helpers.paths import FIXTURES as ALL_FIXTURES

FIXTURES = ALL_FIXTURES / "integrity"
CASES = sorted(d.name for d in FIXTURES.iterdir() if (d / "expected.toml").is_file())
RULE = re.compile(r"^\S+?(?::\d+)?: (integrity-[a-z-]+|nondeterministic-grader): ")


def _rules(output: str) -> list[str]:
    return [m.group(1) for line in output.splitlines() if (m := RULE.match(line))]


@pytest.fixture
def fixture_bench(tmp_path, docker_client):
    made: list[str] = []

    def make(case: str) -> Sforge:
        name = copy_bench(FIXTURES / case, tmp_path / case)
        (tmp_path / case / "expected.toml").unlink()
        made.append(name)
        return Sforge(tmp_path / case, tmp_path / f"results-{case}", name)

    yield make
    for name in made:
        remove_images(docker_client, name)


@pytest.mark.parametrize("case", CASES)
def test_fixture_fires_its_rules(case, fixture_bench):
    with (FIXTURES / case / "expected.toml").open("rb") as fh:
        want = set(tomllib.load(fh)["rules"])
    sf = fixture_bench(case)
    proc = sf.run("check", "--integrity")
    out = proc.stdout + proc.stderr
    assert set(_rules(proc.stdout)) == want, out
    assert proc.returncode == (1 if want else 0), out
    # every probe went through the normal grading: an archive and a result each
    store = sf.results / sf.name / "experiments" / "integrity" / "t"
    results = list((sf.results / sf.name / "evals" / "t").glob("*.json"))
    archives = list(store.glob("*.tar*"))
    assert len(archives) >= 7 and len(results) == len(archives), out


def test_findings_name_the_file_and_what_to_do(fixture_bench):
    sf = fixture_bench("leaky")
    out = sf.run("check", "--integrity").stdout
    leaks = [line for line in out.splitlines() if "integrity-leak" in line]
    by_content = next(line for line in leaks if "expected.txt" in line)
    assert by_content.startswith(f"{sf.bench}/tasks/t/judge/expected.txt: ")
    assert "/opt/expected.txt" in by_content and "keep the judge's" in by_content
    assert not by_content.endswith("(warning)")
    by_name = next(line for line in leaks if "checker.py" in line)  # other content, same path
    assert by_name.startswith(f"{sf.bench}/tasks/t/judge/checker.py: ")
    assert "/home/workspace/t/checker.py" in by_name and by_name.endswith("(warning)")
    assert len(leaks) == 2, out
    canaries = [line for line in out.splitlines() if "integrity-canary" in line]
    assert all(line.startswith(f"{sf.bench}/benchmark.toml: ") for line in canaries)
    assert any("(ENV GRADER_HINT)" in line for line in canaries), out  # the image's config


def test_probe_verdicts_are_cached_like_any_eval(fixture_bench):
    sf = fixture_bench("gullible")
    first = sf.run("check", "--integrity")
    folder = sf.results / sf.name / "evals" / "t"
    before = {p: p.stat().st_mtime_ns for p in folder.glob("*.json")}
    second = sf.run("check", "--integrity")
    assert _rules(first.stdout) == _rules(second.stdout) == ["integrity-probe"]
    assert "replaces-grader" in second.stdout
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*.json")} == before


def test_clean_keeps_the_integrity_cache(fixture_bench):
    """The probes, no-op and reference graded by `check --integrity` are experiments: `clean
    --yes` removes none of their archives, results or logs, and the next check grades nothing."""
    sf = fixture_bench("clean")
    sf.run("check", "--integrity", check=True)
    root = sf.results / sf.name
    kept = [*(root / "evals" / "t").iterdir(), *(root / "experiments").rglob("*")]

    def state() -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for p in kept if p.is_file()}

    before = state()
    assert len([p for p in before if p.suffix == ".json" and p.parent.name == "t"]) >= 7
    listed = sf.run("clean", check=True).stdout
    assert "evals" not in listed and "experiments" not in listed, listed
    sf.run("clean", "--yes", check=True)
    assert state() == before
    sf.run("check", "--integrity", check=True)  # each result read back, none written
    results = {p: m for p, m in before.items() if p.parent == root / "evals" / "t"}
    assert {p: p.stat().st_mtime_ns for p in (root / "evals" / "t").iterdir()} == results


def test_build_warns_about_leaks_without_failing(fixture_bench):
    sf = fixture_bench("leaky")
    proc = sf.run("build")
    assert proc.returncode == 0, proc.stderr
    assert "integrity-leak" in proc.stderr and "(warning)" in proc.stderr
    again = sf.run("build")  # nothing built: nothing read
    assert "integrity-leak" not in again.stderr


def test_repeat_flags_a_reference_judged_differently_each_time(fixture_bench):
    sf = fixture_bench("clean")
    steady = sf.run("check", "--integrity", "--repeat", "2")
    assert steady.returncode == 0 and _rules(steady.stdout) == [], steady.stdout + steady.stderr
    run_sh = sf.bench / "tasks" / "t" / "judge" / "run.sh"
    run_sh.write_text("#!/bin/sh\nmkdir -p /opt/sforge\n"
                      "n=$(od -An -N2 -tu2 /dev/urandom | tr -dc 0-9)\n"
                      "printf '{\"score\": 0.%s, \"valid\": true}\\n' \"$n\" "
                      "> /opt/sforge/result.json\n")
    proc = sf.run("check", "--integrity", "--repeat", "3")
    assert "nondeterministic-grader" in _rules(proc.stdout), proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert sf.run("check", "--integrity", "--repeat", "1").returncode != 0


def test_a_task_without_reference_is_warned_about_as_prove_does(fixture_bench):
    """The oracle check cannot run without a [reference]: a warning naming the task.toml, in
    `sforge prove`'s words, never a silent pass; warnings alone keep the exit code 0."""
    sf = fixture_bench("clean")
    toml = sf.bench / "tasks" / "t" / "task.toml"
    text = toml.read_text()
    toml.write_text(text[:text.index("[reference]")])
    proc = sf.run("check", "--integrity")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{toml}: integrity-reference: no [reference]: the oracle proof is skipped " \
           "(warning)" in proc.stdout.splitlines(), proc.stdout
    assert "0 error(s), 1 warning(s)" in proc.stdout


def _image(tmp_path: Path, *trees: tuple[Path, str]) -> io.BytesIO:
    """An exported image made on the host: each (folder, its path in the image)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for folder, arcname in trees:
            tar.add(folder, arcname=arcname)
    raw.seek(0)
    return raw


def _git_rules(tmp_path: Path, *trees: tuple[Path, str], canary: str | None = None,
               env: list[str] | None = None) -> list[tuple[str, str, str]]:
    task = load_benchmark(FIXTURES / "clean").tasks["t"]
    found = scan_image(_image(tmp_path, *trees), task, canary, tmp_path / "benchmark.toml",
                       env=env)
    return [(f.rule, f.severity, f.message) for f in found]


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_git_with_commits_beyond_head_is_found(tmp_path):
    repo = make_repo(tmp_path / "ws")
    assert _git_rules(tmp_path, (repo, "home/workspace/t")) == []
    git(repo, "checkout", "-qb", "solved")
    (repo / "a.txt").write_text("the solution\n")
    git(repo, "commit", "-qam", "solution")
    git(repo, "checkout", "-q", "main")
    [(rule, severity, message)] = _git_rules(tmp_path, (repo, "home/workspace/t"))
    assert (rule, severity) == ("integrity-git", "error")
    assert "/home/workspace/t/.git in the work image holds 1 commit(s) not reachable from " \
        "HEAD" in message
    git(repo, "branch", "-qD", "solved")  # still in the reflog of HEAD
    assert [r for r, _, _ in _git_rules(tmp_path, (repo, "home/workspace/t"))] \
        == ["integrity-git"]


@needs_git
def test_every_repository_of_the_image_is_read(tmp_path):
    """A repository below cwd is an error like cwd's own; one elsewhere in the image (the
    agent can read it too) a warning; a bare one (`x.git`) counts."""
    sub = make_repo(tmp_path / "sub")
    git(sub, "branch", "v2-final")
    git(sub, "commit", "-q", "--allow-empty", "-m", "later")
    git(sub, "reset", "-q", "--hard", "HEAD~1")
    out = make_repo(tmp_path / "out")
    git(out, "checkout", "-qb", "solution")
    git(out, "commit", "-q", "--allow-empty", "-m", "the answer")
    git(out, "checkout", "-q", "main")
    bare = tmp_path / "store.git"
    git(tmp_path, "clone", "-q", "--bare", str(out), str(bare))
    found = _git_rules(tmp_path, (sub, "home/workspace/t/project"), (out, "opt/src"),
                       (bare, "srv/store.git"))
    assert [(r, s, m.split(" in the work image")[0]) for r, s, m in found] == [
        ("integrity-git", "error", "/home/workspace/t/project/.git"),
        ("integrity-git", "warning", "/opt/src/.git"),
        ("integrity-git", "warning", "/srv/store.git")]


@needs_git
def test_dangling_objects_alternates_and_unreadable_repositories(tmp_path):
    """A dangling blob is something to cat; an alternate object store is followed to the
    image's copy; a repository git cannot read is an error, never \"no commits\"."""
    ws = make_repo(tmp_path / "ws")
    blob = subprocess.run(["git", "-C", str(ws), "hash-object", "-w", "--stdin"],
                          input="the answer is 4242\n", capture_output=True, text=True,
                          check=True).stdout.strip()
    [(rule, severity, message)] = _git_rules(tmp_path, (ws, "home/workspace/t"))
    assert (rule, severity) == ("integrity-git", "error")
    assert "0 commit(s) not reachable from HEAD and 1 other unreachable object(s)" in message
    assert blob  # git gc --prune=now would drop it
    store = make_repo(tmp_path / "store")
    git(store, "branch", "solution")
    git(store, "commit", "-q", "--allow-empty", "-m", "the solution")
    git(store, "reset", "-q", "--hard", "HEAD~1")
    alt = tmp_path / "alt"
    git(tmp_path, "clone", "-q", "--shared", str(store), str(alt))
    (alt / ".git" / "objects" / "info" / "alternates").write_text("/opt/store/.git/objects\n")
    found = _git_rules(tmp_path, (alt, "home/workspace/t"), (store, "opt/store"))
    assert [(r, s) for r, s, _ in found] == [("integrity-git", "error"),
                                            ("integrity-git", "warning")], found
    assert "not reachable from HEAD" in found[0][2]  # read through the alternate
    broken = make_repo(tmp_path / "broken")
    shutil.rmtree(broken / ".git" / "objects")
    (broken / ".git" / "objects").mkdir()
    [(rule, severity, message)] = _git_rules(tmp_path, (broken, "home/workspace/t"))
    assert (rule, severity) == ("integrity-git", "error")
    assert "git cannot read" in message and "cannot be checked" in message


@needs_git
def test_a_judge_file_in_the_history_head_reaches_is_found(tmp_path):
    """A judge file committed, then removed: HEAD's own history still holds its blob, which
    `git show HEAD~1:<name>` prints; found by content, whatever it was called."""
    task = load_benchmark(FIXTURES / "clean").tasks["t"]
    grader = task.dir / "judge" / "run.sh"
    ws = make_repo(tmp_path / "ws")
    (ws / "notes.sh").write_bytes(grader.read_bytes())
    git(ws, "add", "notes.sh")
    git(ws, "commit", "-qm", "wip")
    git(ws, "rm", "-q", "notes.sh")
    git(ws, "commit", "-qm", "tidy")
    git(ws, "reflog", "expire", "--expire=now", "--all")
    git(ws, "gc", "-q", "--prune=now")
    found = _git_rules(tmp_path, (ws, "home/workspace/t"))
    assert [(r, s) for r, s, _ in found] == [("integrity-leak", "error")], found
    assert "git object" in found[0][2] and "/home/workspace/t/.git" in found[0][2]


@needs_git
def test_the_canary_in_a_git_object_or_the_environment_is_found(tmp_path):
    canary = "sforge-canary-5f1d8e2a-integrity"
    ws = make_repo(tmp_path / "ws", f"expected output {canary}\n")
    (ws / "a.txt").write_text("a stub\n")
    git(ws, "commit", "-qam", "stub")  # the canary lives on only compressed in a git object
    found = _git_rules(tmp_path, (ws, "home/workspace/t"), canary=canary,
                       env=["PATH=/usr/bin", f"HINT={canary} is 42"])
    assert sorted((r, s) for r, s, _ in found) == [("integrity-canary", "error")] * 2, found
    assert any("ENV HINT" in m for _, _, m in found)
    assert any("git object of /home/workspace/t/.git" in m for _, _, m in found)


def test_probes_are_the_same_bytes_each_time_and_the_huge_one_is_refused(tmp_path):
    task = load_benchmark(FIXTURES / "clean").tasks["t"]
    limits = ArchiveLimits(max_bytes=1 << 20)
    first = list(probes(task, set(), limits.max_bytes))
    assert [p.data for p in first] == [p.data for p in probes(task, set(), limits.max_bytes)]
    assert len({p.name for p in first}) == len(first) >= 7
    huge = next(p for p in first if p.name == "huge-sparse-file")
    path = tmp_path / "huge.tar.gz"
    path.write_bytes(huge.data)
    try:
        with filter_submission(path, SubmissionRules(paths=("answer.txt",)), limits) as out:
            assert out.refused and "sparse member" in out.refused
    except ArchiveError:
        pass  # refused as unreadable: also never graded


def test_workspace_archive_keeps_only_cwd(tmp_path):
    def entry(name: str, data: bytes = b"x" * 20) -> tuple[tarfile.TarInfo, bytes]:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        return info, data

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in (entry("etc/passwd"), entry("home/workspace/t/a.py"),
                           entry("home/workspace/t/sub/b.py"), entry("home/workspace/tt/c")):
            tar.addfile(info, io.BytesIO(data))
    raw.seek(0)
    every = SubmissionRules(paths=(".",))
    data, dirs = workspace_archive(raw, "/home/workspace/t", every)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == ["a.py", "sub/b.py"]
    assert dirs == set()
    assert data == workspace_archive(io.BytesIO(raw.getvalue()), "/home/workspace/t/", every)[0]


@pytest.mark.parametrize(("table", "field", "words"), [
    ('archive = "solution/missing.tar.gz"', "reference.archive", "no such file"),
    ('archive = "../outside.tar.gz"', "reference.archive", "relative path inside"),
    ('archive = "solution/solve.sh"', "reference.archive", ".tar, .tar.gz or .tgz"),
    ('archive = "a.tar"\nscript = "solution/solve.sh"', "reference", "too many"),
    ('scripts = "solution/solve.sh"', "reference", "check the spelling"),
])
def test_a_bad_reference_names_the_file_and_field(tmp_path, table, field, words):
    root = tmp_path / "b"
    shutil.copytree(FIXTURES / "clean", root)
    toml = root / "tasks" / "t" / "task.toml"
    text = toml.read_text()
    toml.write_text(text[:text.index("[reference]")] + f"[reference]\n{table}\n")
    bench = load_benchmark(root)
    assert not bench.tasks and len(bench.errors) == 1
    err = str(bench.errors[0])
    assert str(toml) in err and field in err and words in err, err


def test_the_canary_is_read_and_checked(tmp_path):
    assert load_benchmark(FIXTURES / "clean").canary == "sforge-canary-5f1d8e2a-integrity"
    root = tmp_path / "b"
    shutil.copytree(FIXTURES / "clean", root)
    (root / "benchmark.toml").write_text('name = "x"\ncanary = "short"\n')
    with pytest.raises(Exception, match="canary"):
        load_benchmark(root)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_git_in_the_exported_workspace_is_copied_out_and_read(tmp_path):
    """The scan of an exported image (here a tar made on the host) takes the workspace's
    .git out to read it, and hands every workspace member to `keep` (the no-op)."""
    task = load_benchmark(FIXTURES / "clean").tasks["t"]
    repo = tmp_path / "ws"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("start of the work\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "start")
    git(repo, "tag", "later")
    (repo / "a.txt").write_text("the solution, committed\n")
    git(repo, "commit", "-qam", "solution")
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(repo, arcname="home/workspace/t")
    kept: list[str] = []
    raw.seek(0)
    found = scan_image(raw, task, None, tmp_path / "benchmark.toml",
                       lambda m: kept.append(m.name))
    assert [f.rule for f in found] == ["integrity-git"], found
    assert "home/workspace/t/a.txt" in kept and "home/workspace/t/.git/HEAD" in kept


def test_a_noop_is_what_submission_selects_however_full_cwd_is(fixture_bench):
    """The no-op (and a reference script's packed cwd) holds what sforge-submit would pack:
    10,001 other files in cwd get neither refused, so a workspace that already scores is
    still found, and the reference still proven."""
    sf = fixture_bench("pays_nothing")
    data = sf.bench / "tasks" / "t" / "environment" / "workspace" / "data"
    data.mkdir()
    for i in range(10_001):
        (data / f"{i}.txt").touch()
    proc = sf.run("check", "--integrity")
    assert _rules(proc.stdout) == ["integrity-noop"], proc.stdout + proc.stderr
    assert "scores: score 1" in proc.stdout


def test_a_noop_the_judge_refuses_is_not_proven(fixture_bench, tmp_path):
    """A no-op over the archive limits proves nothing: an error, never a silent pass."""
    sf = fixture_bench("pays_nothing")
    config = tmp_path / "config.yaml"
    config.write_text("archive_limits: {max_bytes: 100}\n")
    proc = sf.run("--config", str(config), "check", "--integrity")
    toml = sf.bench / "tasks" / "t" / "task.toml"
    line = next(x for x in proc.stdout.splitlines() if "integrity-noop" in x)
    assert line.startswith(f"{toml}:12: integrity-noop: that the workspace as shipped pays "
                           "nothing cannot be proven: the workspace as shipped is refused: "
                           "archive exceeds 100 bytes uncompressed"), proc.stdout
    assert proc.returncode == 1


def test_a_solution_hard_linked_into_cwd_is_found(fixture_bench):
    """The export lists a file's first name in full and the others as hard links: a
    solution in cwd under a second name is found all the same."""
    sf = fixture_bench("clean")
    dockerfile = sf.bench / "tasks" / "t" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + 'RUN echo "the reference solution" > '
                          "/bin/zz && ln /bin/zz /home/workspace/t/solution.txt\n")
    proc = sf.run("check", "--integrity")
    assert _rules(proc.stdout) == ["integrity-solution"], proc.stdout + proc.stderr
    assert "/home/workspace/t/solution.txt" in proc.stdout


def test_sforge_never_runs_a_command_a_submission_put_on_path(fixture_bench, tmp_path):
    """The judge image's PATH starts with cwd/bin, where a submission lands: sforge's own
    steps around [judge] cmd (clearing /opt/sforge before it, copying result.json out after
    it) still run only the system's commands, so planted ones never write the verdict."""
    sf = fixture_bench("planted_path")
    forged = '{"score": 1, "valid": true, "summary": "forged"}'
    members = []
    for name in ("head", "rm", "mkdir", "cat"):
        body = (f"#!/bin/sh\n/bin/mkdir -p /opt/sforge\necho '{forged}' > "
                f"/opt/sforge/result.json\necho '{forged}'\n").encode()
        info = tarfile.TarInfo(f"bin/{name}")
        info.size, info.mode = len(body), 0o755
        members.append((info, body))
    archive = tmp_path / "planted.tar"
    with tarfile.open(archive, "w") as tar:
        for info, body in members:
            tar.addfile(info, io.BytesIO(body))
    proc = sf.run("eval", "--task", "t", "--archive", str(archive), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout)
    assert (got["valid"], got["score"], got["summary"]) == (True, 0.0, "answer checked"), got
