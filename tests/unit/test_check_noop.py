"""The integrity check's no-op submission (sforge.check.probes.Workspace) and its leak scan
of hard links (sforge.check.leaks), on images exported by hand: no Docker."""

from __future__ import annotations

import io
import tarfile
from dataclasses import replace

from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.model import SubmissionRules
from sforge.check.leaks import scan_image
from sforge.check.probes import Workspace
from sforge.grading.archive import ArchiveLimits, filter_submission
from sforge.grading.submission_pack import pack_selected
from tests.helpers.git_images import Member, file, fixture_task, folder, image
from tests.helpers.paths import FIXTURES

CWD = "home/workspace/t"


def hard_link(name: str, target: str) -> Member:
    """A hard-link member, as the engine's export writes the second name of a file."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.LNKTYPE, target, 0o644
    return info, None


def noop(raw: io.BytesIO, rules: SubmissionRules, tmp_path) -> tuple[dict[str, bytes], bool]:
    """The no-op made from the export `raw` ({name: bytes of each file}), and whether the
    judge's archive filter refuses it under the default limits."""
    task = fixture_task()
    task = replace(task, submission=rules)
    ws = Workspace(task.environment.cwd, rules)
    scan_image(raw, task, None, tmp_path / "benchmark.toml", ws.take)
    raw.seek(0)
    ws.resolve(raw)
    path = tmp_path / "noop.tar.gz"
    with ws.archive() as src:
        path.write_bytes(src.read())
    with tarfile.open(path) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar  # type: ignore[union-attr]
                 if m.isreg() or m.islnk()}
    with filter_submission(path, rules, ArchiveLimits(), "/" + CWD) as out:
        return files, bool(out.refused)


def test_the_noop_holds_what_submission_selects_not_all_of_cwd(tmp_path):
    """An agent that did nothing submits what sforge-submit packs: [submission] paths with
    exclude applied; 10,001 other files in cwd do not get the no-op refused."""
    data = [file(f"{CWD}/data/{i}.txt", b"") for i in range(10_001)]
    raw = image(members=(folder(CWD), file(f"{CWD}/answer.txt", "7\n"),
                         file(f"{CWD}/src/a.py", "print(1)\n"), file(f"{CWD}/src/a.o", "x"),
                         file("etc/passwd", "root\n"), *data))
    rules = SubmissionRules(paths=("answer.txt", "src"), exclude=("*.o",))
    files, refused = noop(raw, rules, tmp_path)
    assert files == {"answer.txt": b"7\n", "src/a.py": b"print(1)\n"}
    assert not refused


def test_the_noop_packs_a_hard_link_with_its_content(tmp_path):
    """A hard link in cwd is a file of the workspace like any: packed with its bytes, also
    when its other name lies outside cwd or outside the selection."""
    raw = image(members=(file("bin/zz", "42\n"), hard_link(f"{CWD}/answer.txt", "bin/zz"),
                         file(f"{CWD}/data/b.txt", "43\n"),
                         hard_link(f"{CWD}/b.txt", f"{CWD}/data/b.txt"),
                         file(f"{CWD}/c.txt", "44\n"), hard_link(f"{CWD}/d.txt",
                                                                   f"{CWD}/c.txt")))
    rules = SubmissionRules(paths=("answer.txt", "b.txt", "c.txt", "d.txt"))
    files, refused = noop(raw, rules, tmp_path)
    assert files == {"answer.txt": b"42\n", "b.txt": b"43\n", "c.txt": b"44\n", "d.txt": b"44\n"}
    assert not refused


def test_a_noop_over_the_limits_is_refused_as_the_judge_refuses_it(tmp_path):
    raw = image(members=tuple(file(f"{CWD}/data/{i}.txt", b"") for i in range(10_001)))
    files, refused = noop(raw, SubmissionRules(paths=(".",)), tmp_path)
    assert len(files) == 10_001 and refused


def test_hard_links_in_the_workspace_are_checked_by_name_and_content(tmp_path):
    """A hard link in cwd is checked like the file it names: a solution's name, a judge
    file's name or content; the engine may list the other name (outside cwd) first."""
    task = load_benchmark(FIXTURES / "integrity" / "leaky").tasks["t"]
    judge = task.dir / "judge"
    raw = image(members=(
        file("bin/zz", "the answer is 42, the reference solution\n"),
        hard_link(f"{CWD}/solution.txt", "bin/zz"),
        file("opt/notes.txt", (judge / "expected.txt").read_bytes()),
        hard_link(f"{CWD}/notes.txt", "opt/notes.txt"),
        file("opt/c.py", "# another checker, same name\n"),
        hard_link(f"{CWD}/checker.py", "opt/c.py")))
    found = scan_image(raw, task, None, tmp_path / "benchmark.toml")
    got = sorted((f.rule, f.severity,
                  next(w for w in f.message.split() if w.startswith("/")).rstrip(":"))
                 for f in found)
    assert got == [("integrity-leak", "error", "/home/workspace/t/notes.txt"),
                   ("integrity-leak", "error", "/opt/notes.txt"),
                   ("integrity-leak", "warning", "/home/workspace/t/checker.py"),
                   ("integrity-solution", "error", "/home/workspace/t/solution.txt")], found


def test_a_reference_packs_what_submission_selects(tmp_path):
    """A reference script's packed cwd (a tar of "./…" names) keeps what sforge-submit
    would: the selected paths, a hard link to a file left out packed with its bytes."""
    raw = image(members=(folder("."), file("./data/x.txt", "42\n"),
                         hard_link("./answer.txt", "./data/x.txt"), file("./a.o", "x")))
    rules = SubmissionRules(paths=(".",), exclude=("data", "*.o"))
    with tarfile.open(fileobj=raw) as tar, pack_selected(tar, rules) as out, \
            tarfile.open(fileobj=out) as packed:
        got = {m.name: packed.extractfile(m).read() for m in packed}  # type: ignore[union-attr]
    assert got == {"answer.txt": b"42\n"}
