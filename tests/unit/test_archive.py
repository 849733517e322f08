"""Unit tests of sforge.grading.archive: hostile submission archives are filtered before any
Docker call."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import time
from pathlib import Path

import pytest

from sforge.benchmark.model import SubmissionRules
from sforge.core.errors import InfrastructureError
from sforge.grading import archive_limits, member_filter, tar_stream
from sforge.grading.archive import ArchiveError, FilteredArchive, filter_submission
from sforge.grading.archive_limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_MEMBERS, ArchiveLimits

EVERYTHING = SubmissionRules()


# -- building archives ----
def reg(name: str, data: bytes = b"x", mode: int = 0o644, **attrs: object) -> tuple:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


def special(name: str, kind: bytes, link: str = "", mode: int = 0o755) -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info, None


def d(name: str, mode: int = 0o755) -> tuple:
    return special(name, tarfile.DIRTYPE, mode=mode)


def sym(name: str, target: str) -> tuple:
    return special(name, tarfile.SYMTYPE, target)


def hard(name: str, target: str) -> tuple:
    return special(name, tarfile.LNKTYPE, target)


def make_tar(path: Path, *entries: tuple, mode: str = "w:gz",
             fmt: int = tarfile.GNU_FORMAT) -> Path:
    with tarfile.open(path, mode, format=fmt) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def contents(filtered: FilteredArchive) -> dict[str, tuple[bytes, int, bytes | str]]:
    """name → (type, mode, data or link target) of the filtered tar."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
        for m in tar:
            assert m.uname == m.gname == ""  # numeric owners only
            # no pax record passes but names and the xattrs the filter chose
            assert all(k in ("path", "linkpath", "hdrcharset") or
                       k.startswith(("SCHILY.xattr.", "SCHILY.acl.")) for k in m.pax_headers), \
                m.pax_headers
            body = tar.extractfile(m).read() if m.isreg() else m.linkname
            out[m.name] = (m.type, m.mode, body)
    return out


def run(tmp_path: Path, *entries: tuple, rules: SubmissionRules = EVERYTHING,
        limits: ArchiveLimits | None = None, mode: str = "w:gz") -> FilteredArchive:
    return filter_submission(make_tar(tmp_path / "sub.tar.gz", *entries, mode=mode), rules,
                             limits or ArchiveLimits())


def reasons(filtered: FilteredArchive) -> dict[str, str]:
    return {r.path: r.reason for r in filtered.rejected}


# -- formats ----
def test_defaults_are_exposed() -> None:
    assert ArchiveLimits() == ArchiveLimits(DEFAULT_MAX_MEMBERS, DEFAULT_MAX_BYTES)
    assert (DEFAULT_MAX_MEMBERS, DEFAULT_MAX_BYTES) == (10_000, 1 << 30)


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_compression_detected_by_content_not_name(tmp_path: Path, mode: str) -> None:
    path = make_tar(tmp_path / "misnamed.zip", reg("a.txt", b"hello"), mode=mode)
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.members == ["a.txt"]
        assert contents(filtered)["a.txt"][2] == b"hello"
        assert filtered.size == len(filtered.read_bytes())


@pytest.mark.parametrize("data", [b"this is not a tar archive\n" * 100, b"",
                                  gzip.compress(b"not a tar either" * 100)])
def test_not_a_tar_archive_raises_naming_the_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "garbage.tar.gz"
    path.write_bytes(data)
    with pytest.raises(ArchiveError, match="garbage.tar.gz"):
        filter_submission(path, EVERYTHING)


def test_truncated_gzip_raises(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "t.tar.gz", reg("big", bytes(range(256)) * 4000))
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(ArchiveError, match="t.tar.gz"):
        filter_submission(path, EVERYTHING)


def test_missing_file_raises(tmp_path: Path) -> None:
    """The file, not its content: no verdict about the submission (the next run retries)."""
    with pytest.raises(InfrastructureError, match="nope.tar"):
        filter_submission(tmp_path / "nope.tar", EVERYTHING)


def test_empty_archive_is_fine(tmp_path: Path) -> None:
    with run(tmp_path) as filtered:
        assert (filtered.members, filtered.rejected, filtered.refused) == ([], [], None)
        assert contents(filtered) == {}


# -- names ----
def test_dot_slash_means_relative(tmp_path: Path) -> None:
    filtered = run(tmp_path, d("."), d("./"), reg("./a"), reg("./src/./b"), reg("src//c"),
                   d("./lib/"))
    assert filtered.members == ["a", "src/b", "src/c", "lib"]
    assert set(contents(filtered)) == {"a", "src/b", "src/c", "lib"}
    assert filtered.rejected == []


def test_absolute_and_dotdot_rejected(tmp_path: Path) -> None:
    filtered = run(tmp_path, reg("/etc/passwd"), reg("../up"), reg("a/../../up2"), reg("a/../b"),
                   reg("ok"))
    assert filtered.members == ["ok"]
    assert reasons(filtered) == {"/etc/passwd": "absolute path", "../up": "'..' in path",
                                 "a/../../up2": "'..' in path", "a/../b": "'..' in path"}


def test_devices_and_fifos_rejected(tmp_path: Path) -> None:
    filtered = run(tmp_path, special("fifo", tarfile.FIFOTYPE),
                   special("null", tarfile.CHRTYPE), special("disk", tarfile.BLKTYPE), reg("ok"))
    assert filtered.members == ["ok"]
    assert reasons(filtered) == {"fifo": "FIFO", "null": "device file", "disk": "device file"}


# -- links ----
def test_symlinks_inside_cwd_kept_and_written_last(tmp_path: Path) -> None:
    filtered = run(tmp_path, reg("a"), sym("l", "a"), d("sub"), sym("sub/up", "../a"),
                   sym("sub/here", "."), reg("z"))
    assert filtered.rejected == []
    with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
        names = [(m.name, m.type) for m in tar]
    assert names == [("a", tarfile.REGTYPE), ("sub", tarfile.DIRTYPE), ("z", tarfile.REGTYPE),
                     ("l", tarfile.SYMTYPE), ("sub/up", tarfile.SYMTYPE),
                     ("sub/here", tarfile.SYMTYPE)]


def test_escaping_symlinks_rejected(tmp_path: Path) -> None:
    filtered = run(tmp_path, sym("abs", "/etc"), sym("rel", "../.."), sym("deep/rel", "../../x"),
                   # x/l resolves to cwd, so x/l/.. is cwd's parent: only resolving through the
                   # archive's other links catches it
                   d("x"), sym("x/l", ".."), sym("m", "x/l/.."),
                   sym("loop1", "loop2"), sym("loop2", "loop1"), sym("fine", "x"))
    assert filtered.members == ["x", "x/l", "fine"]
    got = reasons(filtered)
    assert got["abs"] == "symlink to absolute path '/etc'"
    for name in ("rel", "deep/rel", "m", "loop1", "loop2"):
        assert "leaves the working directory" in got[name], name


def test_member_through_symlink_rejected(tmp_path: Path) -> None:
    filtered = run(tmp_path, sym("t", "tests"), reg("t/check.txt", b"hacked"),
                   sym("t2", "/opt/sforge"), reg("t2/result.json"),
                   reg("f"), reg("f/x"))
    assert filtered.members == ["t", "f"]
    got = reasons(filtered)
    assert got["t/check.txt"] == "passes through symlink 't'"
    assert got["f/x"] == "passes through file 'f'"
    assert "t2" in got and "t2/result.json" not in filtered.members


def test_symlink_replacing_a_filled_directory_rejected(tmp_path: Path) -> None:
    filtered = run(tmp_path, reg("d/x"), sym("d", "e"))
    assert filtered.members == ["d/x"]
    assert "would replace directory" in reasons(filtered)["d"]


def test_symlink_target_must_lie_in_submission_paths(tmp_path: Path) -> None:
    rules = SubmissionRules(paths=("solution.txt", "src"))
    filtered = run(tmp_path, sym("solution.txt", "tests/expected.txt"), d("src"),
                   reg("src/a.c"), sym("src/b.c", "a.c"), sym("src/up", ".."), rules=rules)
    assert filtered.members == ["src", "src/a.c", "src/b.c"]
    got = reasons(filtered)
    assert "outside the [submission] paths" in got["solution.txt"]
    assert "outside the [submission] paths" in got["src/up"]


def pax(info_and_data: tuple, path: str | None = None, linkpath: str | None = None) -> tuple:
    """A member whose PAX records carry `path`/`linkpath` as given (a NUL byte included)."""
    info, data = info_and_data
    if path is not None:
        info.name, info.pax_headers = path, {**info.pax_headers, "path": path}
    if linkpath is not None:
        info.linkname, info.pax_headers = linkpath, {**info.pax_headers, "linkpath": linkpath}
    return info, data


def nul_tar(tmp_path: Path, *entries: tuple) -> FilteredArchive:
    return filter_submission(make_tar(tmp_path / "sub.tar.gz", *entries, fmt=tarfile.PAX_FORMAT),
                             EVERYTHING, ArchiveLimits())


def test_nul_in_a_link_target_is_rejected(tmp_path: Path) -> None:
    """A tar reader stops a target at NUL: `x\\0/../../work` would land as `x` and point where
    the filter never looked (the expected answers beside the judge)."""
    rules = SubmissionRules(paths=("answer.txt", "work"))
    path = make_tar(tmp_path / "sub.tar.gz", d("work"),
                    pax(sym("answer.txt", ""), linkpath="tests/expected.txt\0/../../work"),
                    pax(hard("h", ""), linkpath="work\0x"), fmt=tarfile.PAX_FORMAT)
    filtered = filter_submission(path, rules, ArchiveLimits())
    assert filtered.members == ["work"]
    got = reasons(filtered)
    assert got["answer.txt"] == "NUL byte in link target 'tests/expected.txt\\x00/../../work'"
    assert got["h"] == "NUL byte in link target 'work\\x00x'"
    assert "answer.txt" not in contents(filtered)


def test_nul_in_a_member_name_is_rejected(tmp_path: Path) -> None:
    """`tests\\0` would pass an exclude of `tests` and land as `tests`; `a\\0junk` would land
    over `a` while the listing names two members."""
    filtered = nul_tar(tmp_path, reg("answer.txt", b"41"), pax(reg("", b"42"), "answer.txt\0junk"),
                       pax(sym("", "fake"), "tests\0"), pax(reg("", b"x"), "..\0"))
    assert filtered.members == ["answer.txt"]
    assert contents(filtered)["answer.txt"][2] == b"41"
    got = reasons(filtered)
    assert got["answer.txt\\x00junk"] == "NUL byte in name"
    assert got["tests\\x00"] == got["..\\x00"] == "NUL byte in name"


def test_later_member_overrides_symlink_and_vice_versa(tmp_path: Path) -> None:
    filtered = run(tmp_path, sym("a", "b"), reg("a", b"file wins"), reg("c", b"old"),
                   sym("c", "a"), reg("d", b"v1"), reg("d", b"v2"))
    assert filtered.members == ["a", "c", "d"]
    out = contents(filtered)
    assert out["a"] == (tarfile.REGTYPE, 0o644, b"file wins")
    assert out["c"] == (tarfile.SYMTYPE, 0o777, "a")
    with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
        assert [m.name for m in tar].count("a") == 1  # the overridden symlink is not emitted


def test_hardlinks_become_copies_of_earlier_members(tmp_path: Path) -> None:
    filtered = run(tmp_path, reg("a", b"payload", mode=0o755), hard("./b", "./a"),
                   hard("c", "/etc/passwd"), hard("e", "../../etc/shadow"), hard("f", "later"),
                   reg("later"), sym("s", "a"), hard("g", "s"), hard("h", "b"))
    out = contents(filtered)
    assert out["b"] == (tarfile.REGTYPE, 0o755, b"payload")
    assert out["h"] == (tarfile.REGTYPE, 0o755, b"payload")
    assert all(kind != tarfile.LNKTYPE for kind, _, _ in out.values())
    assert set(reasons(filtered)) == {"c", "e", "f", "g"}
    assert "not a regular file accepted earlier" in reasons(filtered)["c"]


def test_hardlink_to_excluded_member_rejected(tmp_path: Path) -> None:
    rules = SubmissionRules(paths=("keep",))
    filtered = run(tmp_path, reg("other", b"x"), hard("keep", "other"), rules=rules)
    assert filtered.members == []
    assert "hardlink" in reasons(filtered)["keep"]


# -- paths and exclude ----
def test_paths_and_exclude(tmp_path: Path) -> None:
    rules = SubmissionRules(paths=("solution.txt", "./src/", "lib/util.c"),
                            exclude=("build/", "*.o", "docs/*.tmp", "__pycache__*"))
    filtered = run(tmp_path, reg("solution.txt"), reg("notes.md"), d("src"), reg("src/a.c"),
                   reg("src/a.o"), d("src/build"), reg("src/build/keep.c"), reg("srcx"),
                   d("src/__pycache__"), reg("src/__pycache__/a.pyc"), d("lib"),
                   reg("lib/util.c"), reg("lib/other.c"), d("build"), reg("build/out"),
                   reg("builder"), rules=rules)
    assert filtered.members == ["solution.txt", "src", "src/a.c", "src/build",
                                "src/build/keep.c", "lib/util.c"]
    assert reasons(filtered) == {
        "notes.md": "not in [submission] paths",
        "src/a.o": "excluded by '*.o'",
        "srcx": "not in [submission] paths",
        # the directory is listed; its contents are not listed again
        "src/__pycache__": "excluded by '__pycache__*'",
        "lib/other.c": "not in [submission] paths",
        "build": "not in [submission] paths",
        "builder": "not in [submission] paths",
    }  # "lib" is a parent of a path: skipped silently


def test_exclude_kinds(tmp_path: Path) -> None:
    rules = SubmissionRules(exclude=("build", "docs/*.tmp", "*.log"))
    filtered = run(tmp_path, reg("build/x"), reg("builder"), reg("src/build/y"),
                   reg("docs/a.tmp"), reg("docs/sub/b.tmp"), reg("docs/c.md"),
                   reg("deep/er/run.log"), rules=rules)
    assert filtered.members == ["builder", "src/build/y", "docs/c.md"]
    assert reasons(filtered) == {"build/x": "excluded by 'build'",
                                 "docs/a.tmp": "excluded by 'docs/*.tmp'",
                                 "docs/sub/b.tmp": "excluded by 'docs/*.tmp'",
                                 "deep/er/run.log": "excluded by '*.log'"}


def test_rejected_listing_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(member_filter, "MAX_LISTED_REJECTED", 5)
    filtered = run(tmp_path, *[reg(f"/abs{i}") for i in range(12)])
    assert len(filtered.rejected) == 6
    assert filtered.rejected[-1].reason == "7 more rejected members not listed"


# -- output attributes ----
def acl_bin(*entries: tuple[int, int, int]) -> str:
    """A system.posix_acl_* xattr value, as a pax record string."""
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    return raw.decode("utf-8", "surrogateescape")


NOBODY = 0xFFFFFFFF
DEFAULT_ACL = acl_bin((1, 7, NOBODY), (4, 7, NOBODY), (8, 7, 1234), (0x10, 7, NOBODY),
                      (0x20, 0, NOBODY))


def xattrs(info: tarfile.TarInfo) -> dict[str, str]:
    return {k: v for k, v in info.pax_headers.items() if k.startswith("SCHILY.xattr.")}


def _metadata_tar(tmp_path: Path) -> Path:
    shared = d("shared", mode=0o2770)
    shared[0].gid = 1234
    shared[0].pax_headers = {"SCHILY.xattr.system.posix_acl_default": DEFAULT_ACL,
                             "SCHILY.xattr.user.note": "kept",
                             "SCHILY.xattr.trusted.overlay.opaque": "y",
                             "atime": "1.5", "LIBARCHIVE.creationtime": "2"}
    return make_tar(tmp_path / "pax.tar",
                    reg("suid", mode=0o4755, uid=1000, gid=1000, uname="eve"),
                    reg("plain", mode=0o600), d("dir", mode=0o3777), shared,
                    reg("cap", pax_headers={"SCHILY.xattr.security.capability": "x"}),
                    hard("suid-again", "suid"), mode="w", fmt=tarfile.PAX_FORMAT)


def test_metadata_kept_by_default(tmp_path: Path) -> None:
    """Modes (setuid/setgid/sticky too), numeric owners, ACLs and user xattrs are the answer of
    some tasks: kept. Capabilities and trusted.* (overlayfs' own) never are, and say so."""
    with filter_submission(_metadata_tar(tmp_path), EVERYTHING) as filtered:
        out = contents(filtered)
        with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
            infos = {m.name: m for m in tar}
    assert out["suid"][1] == 0o4755 and (infos["suid"].uid, infos["suid"].gid) == (1000, 1000)
    assert out["suid-again"][1] == 0o4755 and infos["suid-again"].uid == 1000
    assert out["plain"][1] == 0o600
    assert out["dir"][1] == 0o3777
    assert out["shared"][1] == 0o2770 and infos["shared"].gid == 1234
    assert xattrs(infos["shared"]) == {
        "SCHILY.xattr.system.posix_acl_default": DEFAULT_ACL,
        "SCHILY.xattr.user.note": "kept"}
    # the same ACL as GNU tar's text, for extraction by GNU tar
    assert infos["shared"].pax_headers["SCHILY.acl.default"] == (
        "user::rwx\ngroup::rwx\ngroup:1234:rwx\nmask::rwx\nother::---\n")
    assert not xattrs(infos["cap"])
    assert {(c.path, c.change.split(" (")[0]) for c in filtered.changed} == {
        ("shared", "xattr trusted.overlay.opaque dropped"),
        ("cap", "xattr security.capability dropped")}


def test_metadata_stripped_when_the_task_says_so(tmp_path: Path) -> None:
    rules = SubmissionRules(keep_metadata=())
    with filter_submission(_metadata_tar(tmp_path), rules) as filtered:
        out = contents(filtered)
        with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
            infos = {m.name: m for m in tar}
    assert out["suid"][1] == 0o755 and infos["suid"].uid == 0
    assert out["dir"][1] == 0o777
    assert out["shared"][1] == 0o770 and not xattrs(infos["shared"])
    changes = {(c.path, c.change.split(" (")[0]) for c in filtered.changed}
    assert {("suid", "mode 4755 -> 0755"), ("suid", "owner 1000:1000 -> 0:0"),
            ("dir", "mode 3777 -> 0777"), ("shared", "mode 2770 -> 0770"),
            ("shared", "owner 0:1234 -> 0:0"),
            ("shared", "ACL system.posix_acl_default dropped"),
            ("shared", "xattr user.note dropped")} <= changes


def test_acl_text_of_gnu_tar_becomes_the_xattr(tmp_path: Path) -> None:
    """GNU tar --acls writes SCHILY.acl.* text; numeric entries become the binary xattr, named
    ones cannot be resolved here and are listed as dropped."""
    info = d("shared", mode=0o2770)
    info[0].pax_headers = {"SCHILY.acl.default":
                           "user::rwx\ngroup::rwx\ngroup:1234:rwx\ngroup:research:r-x\n"
                           "mask::rwx\nother::---\n"}
    path = make_tar(tmp_path / "acl.tar", info, mode="w", fmt=tarfile.PAX_FORMAT)
    with filter_submission(path, EVERYTHING) as filtered:
        data = filtered.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        kept = tar.getmember("shared").pax_headers
    assert {k: v for k, v in kept.items() if k != "hdrcharset"} == {
        "SCHILY.xattr.system.posix_acl_default": DEFAULT_ACL,
        "SCHILY.acl.default": "user::rwx\ngroup::rwx\ngroup:1234:rwx\nmask::rwx\nother::---\n"}
    assert [c.change.split(":")[0] for c in filtered.changed] == [
        "ACL entry 'group"]
    assert "group:research:r-x" in filtered.changed[0].change


def test_invalid_acl_and_too_many_xattrs(tmp_path: Path) -> None:
    bad = reg("f", pax_headers={"SCHILY.xattr.system.posix_acl_access": "nonsense"})
    with filter_submission(make_tar(tmp_path / "bad.tar", bad, mode="w",
                                    fmt=tarfile.PAX_FORMAT), EVERYTHING) as filtered:
        assert [c.change for c in filtered.changed] == [
            "ACL system.posix_acl_access dropped: not a valid POSIX ACL"]
    many = reg("f", pax_headers={f"SCHILY.xattr.user.k{i}": "v"
                                 for i in range(archive_limits.MAX_XATTRS + 1)})
    with filter_submission(make_tar(tmp_path / "many.tar", many, mode="w",
                                    fmt=tarfile.PAX_FORMAT), EVERYTHING) as filtered:
        assert filtered.refused and "extended attributes" in filtered.refused


def test_xattr_bytes_count_toward_the_size_cap(tmp_path: Path) -> None:
    big = reg("f", pax_headers={"SCHILY.xattr.user.big": "v" * 5000})
    path = make_tar(tmp_path / "big.tar", big, mode="w", fmt=tarfile.PAX_FORMAT)
    with filter_submission(path, EVERYTHING, ArchiveLimits(max_bytes=4000)) as filtered:
        assert filtered.refused and "bytes" in filtered.refused


@pytest.mark.parametrize(("paths", "names", "warn"), [
    (["answer.txt"], ["app/", "app/answer.txt"], True),  # nothing selected, one level down is
    (["."], ["app/", "app/answer.txt"], True),  # lands in /app/app
    (["."], ["src/", "src/main.c"], False),  # a real single directory
    (["answer.txt"], ["answer.txt", "other/x"], False),
    (["answer.txt"], ["app/x"], False),  # stripping app/ would not help either
])
def test_wrongly_rooted_archive_is_said(tmp_path: Path, paths, names, warn) -> None:
    entries = [d(n.rstrip("/")) if n.endswith("/") else reg(n) for n in names]
    path = make_tar(tmp_path / "root.tar", *entries)
    with filter_submission(path, SubmissionRules(paths=tuple(paths)), cwd="/app") as filtered:
        assert bool(filtered.warnings) is warn, filtered.warnings
        if warn:
            assert "wrongly rooted" in filtered.warnings[0] and "'app/'" in filtered.warnings[0]


def test_a_wrongly_rooted_archive_refused_lands_nowhere(tmp_path: Path) -> None:
    """Everything under 'sub/' and so refused by the [submission] paths: the warning says
    the members were refused because of that folder and how to pack from inside it; it
    never says they land somewhere."""
    path = make_tar(tmp_path / "nested.tar", d("sub"), reg("sub/solve.py"))
    with filter_submission(path, SubmissionRules(paths=("solve.py",)),
                           cwd="/work") as filtered:
        [warning] = filtered.warnings
        assert "lands in" not in warning and "/work/sub" not in warning, warning
        assert "every member is under 'sub/'" in warning and "refused" in warning, warning
        assert "pack from inside it: tar -C sub -czf" in warning, warning
        assert filtered.rejected, filtered.rejected


def test_long_and_non_utf8_names_survive(tmp_path: Path) -> None:
    long = "d/" + "/".join(["n" * 250] * 4)
    odd = b"caf\xe9".decode("utf-8", "surrogateescape")
    path = tmp_path / "odd.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tar:
        for name in (long, odd):
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.members == [long, odd]


def test_large_output_spools_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tar_stream, "SPOOL_IN_MEMORY", 1024)
    big = bytes(range(256)) * 64
    with run(tmp_path, reg("a", big), hard("b", "a")) as filtered:
        out = contents(filtered)
        assert out["a"][2] == big and out["b"][2] == big


# -- caps ----
def test_member_cap_refuses_the_archive(tmp_path: Path) -> None:
    filtered = run(tmp_path, *[reg(f"f{i}") for i in range(20)],
                   limits=ArchiveLimits(max_members=10))
    assert filtered.refused == "archive exceeds 10 members"
    assert filtered.members == [] and filtered.size == 0


def test_size_cap_refuses_the_archive(tmp_path: Path) -> None:
    filtered = run(tmp_path, reg("a", b"x" * 600), reg("b", b"x" * 600),
                   limits=ArchiveLimits(max_bytes=1000))
    assert filtered.refused == "archive exceeds 1000 bytes uncompressed"


def test_hardlink_copies_count_toward_the_size_cap(tmp_path: Path) -> None:
    links = [hard(f"l{i}", "a") for i in range(5)]
    filtered = run(tmp_path, reg("a", b"x" * 300), *links, limits=ArchiveLimits(max_bytes=1000))
    assert filtered.refused == "archive exceeds 1000 bytes uncompressed"


def test_excluded_members_count_toward_the_caps(tmp_path: Path) -> None:
    filtered = run(tmp_path, reg("junk", b"x" * 2000), rules=SubmissionRules(paths=("keep",)),
                   limits=ArchiveLimits(max_bytes=1000))
    assert filtered.refused


def test_size_counted_from_headers_before_data(tmp_path: Path) -> None:
    """A header claiming 10 GiB is refused at once; the data is never read (gzip bombs)."""
    info = tarfile.TarInfo("bomb")
    info.size = 10 << 30
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(gzip.compress(info.tobuf(tarfile.GNU_FORMAT) + bytes(512 * 100)))
    t0 = time.monotonic()
    filtered = filter_submission(path, EVERYTHING, ArchiveLimits(max_bytes=1 << 20))
    assert filtered.refused == f"archive exceeds {1 << 20} bytes uncompressed"
    assert time.monotonic() - t0 < 1


def test_header_bloat_is_capped_too(tmp_path: Path) -> None:
    """A huge long-name header is no file data, but still decompressed bytes: capped."""
    filtered = run(tmp_path, reg("n" * 200_000), limits=ArchiveLimits(max_members=2, max_bytes=0))
    assert filtered.refused == "archive exceeds 0 bytes uncompressed"


def test_names_over_platform_limits_rejected_before_the_daemon(tmp_path: Path) -> None:
    """A 300-byte component or a 4,200-character path: the kernel cannot create them, so they
    are rejected members (listed cut short), not a Docker error later."""
    component = "c" * 300
    deep = "/".join(["p" * 200] * 21)  # 4,220 characters
    filtered = run(tmp_path, reg(component), reg(deep), reg("ok.txt"),
                   sym("l", "x/" * 2100), mode="w")
    got = reasons(filtered)
    assert list(filtered.members) == ["ok.txt"]
    assert got[component].startswith("name component of 300 bytes")
    [(listed, why)] = [(p, r) for p, r in got.items() if p.startswith("pppp")]
    assert why.startswith("path of 4") and "platform's limit is 4095" in why
    assert len(listed) < 1100 and listed.endswith("more characters)")
    assert "symlink target longer than 4095" in got["l"]


def test_name_limit_counts_cwd(tmp_path: Path) -> None:
    name = "/".join(["q" * 200] * 20)  # 4,019 bytes: fits under "/", not under a deep cwd
    path = make_tar(tmp_path / "a.tar", reg(name), mode="w")
    with filter_submission(path, EVERYTHING) as ok:
        assert ok.members == [name]
    with filter_submission(path, EVERYTHING, cwd="/" + "w" * 200) as deep:
        assert deep.members == [] and "platform's limit" in deep.rejected[0].reason


def test_long_name_header_bomb_refused_without_reading_it(tmp_path: Path) -> None:
    """A 300 MB GNU long-name record in a ~300 KB archive: refused from its header, and the
    name never held in memory (it would be 300 MB of RSS and of result JSON)."""
    import resource

    size = 300 << 20
    head = tarfile.TarInfo("././@LongLink")
    head.type = tarfile.GNUTYPE_LONGNAME
    head.size = size
    path = tmp_path / "bomb.tar.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(head.tobuf(tarfile.USTAR_FORMAT))
        chunk = b"n" * (1 << 20)
        for _ in range(size >> 20):
            fh.write(chunk)
    assert path.stat().st_size < 2 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.refused and "long-name or pax header" in filtered.refused
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB
    with filter_submission(path, EVERYTHING, ArchiveLimits(max_bytes=100 << 20)) as small:
        assert small.refused == f"archive exceeds {100 << 20} bytes uncompressed"


def test_pax_header_bomb_refused(tmp_path: Path) -> None:
    head = tarfile.TarInfo("PaxHeaders/x")
    head.type = tarfile.XHDTYPE
    head.size = 50 << 20
    path = tmp_path / "pax.tar.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(head.tobuf(tarfile.USTAR_FORMAT))
        fh.write(b"9 a=bcd\n" * ((50 << 20) // 8))
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.refused and "pax header" in filtered.refused


def test_header_bytes_count_toward_max_bytes(tmp_path: Path) -> None:
    """Empty files cost no data, but each costs a 512-byte header: 100 of them exceed 40 KB."""
    entries = [reg(f"f{i}", b"") for i in range(100)]
    assert not run(tmp_path, *entries, limits=ArchiveLimits(max_bytes=60_000)).refused
    assert run(tmp_path, *entries, limits=ArchiveLimits(max_bytes=40_000)).refused


def test_symlink_web_resolves_in_linear_time(tmp_path: Path) -> None:
    """Each link names the next one several times: naive resolution would be exponential."""
    links = [sym(f"l{i}", "/".join([f"l{i + 1}", ".."] * 4) + f"/l{i + 1}") for i in range(40)]
    t0 = time.monotonic()
    filtered = run(tmp_path, *links, reg("l40"))
    assert time.monotonic() - t0 < 2
    assert filtered.rejected == [] and len(filtered.members) == 41


# -- archives that used to raise (no result written: the leaderboard froze) ----
def pax_records(records: dict[str, str]) -> bytes:
    """A pax extended header block and its records, built by hand (any value at all)."""
    body = b""
    for key, value in records.items():
        rec = f" {key}={value}\n".encode("utf-8", "surrogateescape")
        n = len(rec)
        while len(str(n)) + len(rec) != n:
            n = len(str(n)) + len(rec)
        body += str(n).encode() + rec
    head = tarfile.TarInfo("././@PaxHeader")
    head.type, head.size = tarfile.XHDTYPE, len(body)
    return head.tobuf(tarfile.USTAR_FORMAT) + body + bytes(-len(body) % 512)


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(tarfile.USTAR_FORMAT)


def blocks(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def raw_tar(tmp_path: Path, raw: bytes, end: bytes = bytes(1024)) -> Path:
    path = tmp_path / "raw.tar.gz"
    path.write_bytes(gzip.compress(raw + end, 1))
    return path


def old_gnu_sparse(extended_blocks: int) -> bytes:
    """A GNU 'S' member whose sparse map continues over `extended_blocks` extra blocks."""
    info = tarfile.TarInfo("solve.py")
    info.type = tarfile.GNUTYPE_SPARSE
    buf = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    buf[482] = 1  # isextended
    buf[483:495] = b"00000000001\0"  # realsize
    buf[148:156] = b" " * 8
    buf[148:156] = b"%06o\0 " % sum(buf)
    entry = tarfile.itn(1, 12, tarfile.GNU_FORMAT) * 2
    more = entry * 21 + b"\x01" + bytes(7)
    return bytes(buf) + more * (extended_blocks - 1) + entry * 21 + bytes(8)


def sparse_archives(tmp_path: Path) -> dict[str, Path]:
    pairs = 2_000_000  # a map tarfile would hold as ~150 MB of Python objects
    big_map = f"{pairs}\n".encode() + b"1\n" * (2 * pairs)
    return {
        "pax 1.0": raw_tar(tmp_path / "1.0", pax_records({
            "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "solve.py",
            "GNU.sparse.realsize": "1"}) + header("GNUSparseFile.0/solve.py", len(big_map))
            + blocks(big_map)),
        "pax 0.1": raw_tar(tmp_path / "0.1", pax_records({
            "GNU.sparse.name": "solve.py", "GNU.sparse.realsize": "1",
            "GNU.sparse.size": "1", "GNU.sparse.map": "0,1"}) + header("x", 1) + blocks(b"x")),
        "pax 0.0": raw_tar(tmp_path / "0.0", pax_records({
            "GNU.sparse.size": "1", "GNU.sparse.numblocks": "1", "GNU.sparse.offset": "0",
            "GNU.sparse.numbytes": "1"}) + header("solve.py", 1) + blocks(b"x")),
        "pax 1.0 unknown minor": raw_tar(tmp_path / "1.1", pax_records({
            "GNU.sparse.major": "1", "GNU.sparse.minor": "1", "GNU.sparse.name": "solve.py",
            "GNU.sparse.realsize": "1"}) + header("solve.py", 1) + blocks(b"x")),
        "old GNU": raw_tar(tmp_path / "gnu", old_gnu_sparse(50_000)),
    }


@pytest.mark.parametrize("kind", ["pax 1.0", "pax 0.1", "pax 0.0", "pax 1.0 unknown minor",
                                  "old GNU"])
def test_sparse_members_refused_before_their_map_is_read(tmp_path: Path, kind: str) -> None:
    """No submission tool writes sparse members, and tarfile would hold a sparse map of any
    length in memory before a cap applies (a 2 KB archive took 2.8 GB)."""
    import resource

    for sub in ("1.0", "0.1", "0.0", "1.1", "gnu"):
        (tmp_path / sub).mkdir()
    path = sparse_archives(tmp_path)[kind]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.refused and filtered.refused.startswith("sparse member")
        assert "solve.py" in filtered.refused and "not accepted" in filtered.refused
    assert time.monotonic() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 << 10  # KiB
    with run(tmp_path, reg("solve.py", b"print(1)"), d("src")) as normal:
        assert (normal.refused, normal.members) == (None, ["solve.py", "src"])


@pytest.mark.parametrize("kind", ["pax", "long name"])
def test_long_chains_of_extension_headers_refused(tmp_path: Path, kind: str) -> None:
    """2,000 pax or long-name headers before one member: tarfile reads them recursively."""
    one = (pax_records({"comment": "x"}) if kind == "pax" else
           header("././@LongLink", 9, tarfile.GNUTYPE_LONGNAME) + blocks(b"solve.py\0"))
    path = raw_tar(tmp_path, one * 2000 + header("solve.py", 3) + blocks(b"abc"))
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.refused and "extension headers in a row" in filtered.refused


def test_extension_headers_tools_write_still_pass(tmp_path: Path) -> None:
    """GNU tar writes a long link and a long name before one member; git archive a global pax
    header: fine."""
    long = "d/" + "n" * 150
    link = tarfile.TarInfo(long + "-link")
    link.type, link.linkname = tarfile.SYMTYPE, "n" * 150
    with run(tmp_path, d("d"), reg(long), (link, None)) as filtered:
        assert filtered.refused is None and len(filtered.members) == 3
    glob = tarfile.TarInfo("pax_global_header")
    glob.type = tarfile.XGLTYPE
    body = b"52 comment=0123456789012345678901234567890123456789\n"
    glob.size = len(body)
    raw = glob.tobuf(tarfile.USTAR_FORMAT) + blocks(body)
    with filter_submission(raw_tar(tmp_path, raw + header("solve.py", 1) + blocks(b"x")),
                           EVERYTHING) as filtered:
        assert (filtered.refused, filtered.members) == (None, ["solve.py"])


@pytest.mark.parametrize(("value", "want"), [("nan", 0), ("inf", 8**11 - 1), ("-inf", 0),
                                             ("1e30", 8**11 - 1), ("-5", 0)])
def test_mtime_out_of_range_is_clamped_and_said(tmp_path: Path, value: str, want: int) -> None:
    path = make_tar(tmp_path / "m.tar", reg("solve.py", pax_headers={"mtime": value}),
                    mode="w", fmt=tarfile.PAX_FORMAT)
    with filter_submission(path, EVERYTHING) as filtered:
        with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
            assert tar.getmember("solve.py").mtime == want
            assert "mtime" not in tar.getmember("solve.py").pax_headers
        assert [c.change.split(" (")[0] for c in filtered.changed] == [
            f"mtime {float(value)!r} -> {want}"]


def test_owner_out_of_range_becomes_root_and_said(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "o.tar",
                    reg("a", pax_headers={"uid": "99999999999999999999999", "gid": "-1"}),
                    reg("b", pax_headers={"uid": "4294967295", "gid": "4294967294"}),
                    mode="w", fmt=tarfile.PAX_FORMAT)
    with filter_submission(path, EVERYTHING) as filtered:
        with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
            owners = {m.name: (m.uid, m.gid) for m in tar}
        assert owners == {"a": (0, 0), "b": (0, 4294967294)}
        assert {(c.path, c.change.split(" (")[0]) for c in filtered.changed} == {
            ("a", "owner 99999999999999999999999:-1 -> 0:0"),
            ("b", "owner 4294967295:4294967294 -> 0:4294967294")}


def test_negative_size_refuses_the_archive(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "s.tar", reg("solve.py", b"abc", pax_headers={"size": "-1"}),
                    mode="w", fmt=tarfile.PAX_FORMAT)
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.refused == "member 'solve.py' has a negative size"


def test_xattrs_the_kernel_would_refuse_are_dropped(tmp_path: Path) -> None:
    """Docker fails to extract these (ENOSPC, ERANGE, EINVAL, EACCES): an infrastructure
    error for every later grade, not a verdict, unless they are dropped here."""
    only_user_obj = acl_bin((1, 7, NOBODY))
    named_without_mask = acl_bin((1, 7, NOBODY), (2, 7, 5), (4, 7, NOBODY), (0x20, 0, NOBODY))
    good = acl_bin((1, 7, NOBODY), (4, 5, NOBODY), (0x20, 0, NOBODY))
    path = make_tar(
        tmp_path / "x.tar",
        reg("big", pax_headers={"SCHILY.xattr.user.big": "A" * 10_000}),
        reg("name", pax_headers={"SCHILY.xattr.user." + "n" * 300: "v"}),
        reg("acl1", pax_headers={"SCHILY.xattr.system.posix_acl_access": only_user_obj}),
        reg("acl2", pax_headers={"SCHILY.xattr.system.posix_acl_access": named_without_mask}),
        reg("dflt", pax_headers={"SCHILY.xattr.system.posix_acl_default": good}),
        reg("many", pax_headers={f"SCHILY.xattr.user.k{i}": "A" * 1000 for i in range(4)}),
        reg("empty", pax_headers={"SCHILY.xattr.user.": "x"}),
        reg("ok", pax_headers={"SCHILY.xattr.system.posix_acl_access": good,
                               "SCHILY.xattr.user.note": "A" * 3000}),
        mode="w", fmt=tarfile.PAX_FORMAT)
    with filter_submission(path, EVERYTHING) as filtered:
        with tarfile.open(fileobj=io.BytesIO(filtered.read_bytes())) as tar:
            kept = {m.name: sorted(xattrs(m)) for m in tar}
        changes = {(c.path, c.change.split(":")[0].split(" (")[0]) for c in filtered.changed}
    assert kept == {"big": [], "name": [], "acl1": [], "acl2": [], "dflt": [],
                    "many": ["SCHILY.xattr.user.k0", "SCHILY.xattr.user.k1",
                             "SCHILY.xattr.user.k2"], "empty": [],
                    "ok": ["SCHILY.xattr.system.posix_acl_access", "SCHILY.xattr.user.note"]}
    assert changes == {
        ("big", "xattr user.big dropped"), ("name", f"xattr user.{'n' * 300} dropped"),
        ("acl1", "ACL system.posix_acl_access dropped"),
        ("acl2", "ACL system.posix_acl_access dropped"),
        ("dflt", "ACL system.posix_acl_default dropped"),
        ("many", "xattr user.k3 dropped"), ("empty", "xattr user. dropped")}


def test_symlink_chain_past_the_platform_limit_rejected(tmp_path: Path) -> None:
    """l0 -> l1 -> … -> l2000: no kernel follows it (40 links), and resolving it recursively
    overflowed the stack."""
    chain = [sym(f"l{i}", f"l{i + 1}") for i in range(2000)]
    filtered = run(tmp_path, *chain, reg("l2000"))
    assert "l2000" in filtered.members and "l1960" in filtered.members
    assert "l1959" not in filtered.members
    assert reasons(filtered)["l0"] == "symlink to 'l1' follows more than 40 symlinks"
    assert len(filtered.members) == 41


def test_unexpected_parse_errors_are_the_archives_verdict(tmp_path: Path) -> None:
    """Whatever tarfile raises on hostile input (here a hdrcharset that is not UTF-8) says the
    archive is unreadable, never a traceback."""
    path = raw_tar(tmp_path, pax_records({"hdrcharset": "\udcff"}) + header("a", 1)
                   + blocks(b"x"))
    with pytest.raises(ArchiveError, match="not a readable tar archive"):
        filter_submission(path, EVERYTHING)


def test_memory_holds_one_members_headers_not_the_archives(tmp_path: Path) -> None:
    """tarfile keeps every member it read, pax records and all: 200 members with 100 KB of
    tiny pax records each would hold ~300 MB of Python objects at the end."""
    import resource

    records = pax_records({f"k{i}": "" for i in range(10_000)})
    one = records + header("f", 1) + blocks(b"x")
    path = raw_tar(tmp_path, one * 200)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with filter_submission(path, EVERYTHING) as filtered:
        assert filtered.refused is None and filtered.members == ["f"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB
