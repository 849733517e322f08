"""Unit: content hashes of trees, the hash cache, and image tag composition (no Docker)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

import sforge.benchmark.hashing
from sforge.benchmark.hashing import HashCache, digest, file_sha256, tree_entries
from sforge.benchmark.images import base_ref, context_blobs, task_refs
from sforge.benchmark.loader import load_benchmark

BLOB_SHA = "ab" * 32
OLD = time.time() - 3600  # an mtime well outside the cache's "racily clean" window


def make_tree(root: Path) -> Path:
    """A small environment/ tree with one of every kind of entry."""
    root.mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM busybox:1.36\nCOPY environment/ /w/\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hello\n")
    (root / "run.sh").chmod(0o755)
    (root / "Dockerfile").chmod(0o644)
    (root / "src").mkdir()
    (root / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (root / "src" / "main.c").chmod(0o644)
    (root / "empty").mkdir()
    (root / "latest").symlink_to("src/main.c")
    (root / "blobs").mkdir()  # the blob itself is absent
    return root


BLOBS = {"environment/blobs/data.tar.gz": BLOB_SHA}


def tree_hash(root: Path, blobs: dict[str, str] | None = None,
              cache: HashCache | None = None) -> str:
    return digest(tree_entries(root, "environment", BLOBS if blobs is None else blobs,
                               cache or HashCache()))


def set_mtime(root: Path, when: float) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)


@pytest.fixture
def tree(tmp_path) -> Path:
    return make_tree(tmp_path / "a" / "environment")


# ---------------------------------------------------------------------------- tree hash


def test_golden_hash(tree):
    # GOLDEN VALUE. This pins the tree hash format (entry lines, their order, the digest).
    # A change to this value changes every image tag of every user, so every image of
    # every benchmark rebuilds: make such a change deliberately, never as a side effect.
    assert tree_hash(tree) == "95c0572098c4"
    assert tree_entries(tree, "environment", BLOBS, HashCache()) == sorted([
        f"B\0environment/blobs/data.tar.gz\0{BLOB_SHA}",
        "D\0environment/empty",
        "F\0environment/Dockerfile\0-\0" + file_sha256(tree / "Dockerfile"),
        "F\0environment/run.sh\0x\0" + file_sha256(tree / "run.sh"),
        "F\0environment/src/main.c\0-\0" + file_sha256(tree / "src" / "main.c"),
        "L\0environment/latest\0src/main.c",
    ])


def test_digest_is_12_hex_and_order_sensitive():
    d = digest(["a", "b"])
    assert len(d) == 12 and int(d, 16) >= 0
    assert d != digest(["b", "a"])
    assert d != digest(["ab"])  # entries are separated


def test_content_change_changes_hash(tree):
    before = tree_hash(tree)
    (tree / "src" / "main.c").write_text("int main(void) { return 1; }\n")
    assert tree_hash(tree) != before


def test_rename_changes_hash(tree):
    before = tree_hash(tree)
    (tree / "src" / "main.c").rename(tree / "src" / "other.c")
    assert tree_hash(tree) != before


def test_prefix_is_part_of_the_hash(tree):
    cache = HashCache()
    assert (digest(tree_entries(tree, "environment", {}, cache))
            != digest(tree_entries(tree, "judge", {}, cache)))


def test_exec_bit_changes_hash(tree):
    before = tree_hash(tree)
    (tree / "run.sh").chmod(0o644)
    assert tree_hash(tree) != before
    (tree / "run.sh").chmod(0o755)
    assert tree_hash(tree) == before
    # Only the exec bit counts, not the other permission bits.
    (tree / "run.sh").chmod(0o700)
    assert tree_hash(tree) == before


def test_symlink_counts_by_target_string(tree):
    before = tree_hash(tree)
    (tree / "latest").unlink()
    (tree / "latest").symlink_to("./src/main.c")  # same file, different target string
    assert tree_hash(tree) != before


def test_symlink_is_not_followed(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("one\n")
    (tree / "out").symlink_to(outside)  # a link to a directory outside the tree
    (tree / "out_file").symlink_to(outside / "secret.txt")
    entries = tree_entries(tree, "environment", BLOBS, HashCache())
    # The links are there by their target strings; nothing behind them is read.
    assert f"L\0environment/out\0{outside}" in entries
    assert f"L\0environment/out_file\0{outside / 'secret.txt'}" in entries
    assert not any(line.startswith("F\0environment/out") for line in entries)
    before = tree_hash(tree)
    (outside / "secret.txt").write_text("two, and longer\n")
    (outside / "more.txt").write_text("more\n")
    assert tree_hash(tree) == before


def test_symlink_differs_from_file_with_same_content(tree):
    before = tree_hash(tree)
    (tree / "latest").unlink()
    (tree / "latest").write_text("src/main.c")
    assert tree_hash(tree) != before


def test_empty_directory_counts(tree):
    before = tree_hash(tree)
    (tree / "empty2").mkdir()
    assert tree_hash(tree) != before
    (tree / "empty2").rmdir()
    assert tree_hash(tree) == before
    # A directory that is no longer empty is described by its files instead.
    (tree / "empty" / "f").write_text("")
    assert tree_hash(tree) != before


def test_blob_counts_by_declared_sha(tree, monkeypatch):
    absent = tree_hash(tree)
    # Present with its real bytes, or with any bytes at all: the same hash, and never read.
    reads: list[str] = []
    real = sforge.benchmark.hashing.file_sha256
    monkeypatch.setattr(sforge.benchmark.hashing, "file_sha256",
                        lambda p: reads.append(str(p)) or real(p))
    (tree / "blobs" / "data.tar.gz").write_bytes(b"the real data")
    assert tree_hash(tree) == absent
    (tree / "blobs" / "data.tar.gz").write_bytes(b"something else entirely")
    assert tree_hash(tree) == absent
    assert not any(r.endswith("data.tar.gz") for r in reads)
    assert reads  # the other files were read
    # The blob's directory missing or empty: the same hash (fetching creates it).
    shutil.rmtree(tree / "blobs")
    assert tree_hash(tree) == absent
    # A different declared sha256 is a different tree.
    assert tree_hash(tree, {"environment/blobs/data.tar.gz": "cd" * 32}) != absent
    # Undeclared, the same file counts by its bytes (and the empty blobs/ dir counts too).
    (tree / "blobs").mkdir()
    assert tree_hash(tree, {}) != absent


def test_mtime_does_not_count(tree):
    before = tree_hash(tree)
    set_mtime(tree, OLD)
    assert tree_hash(tree) == before
    set_mtime(tree, time.time() + 60)
    assert tree_hash(tree) == before
    os.utime(tree, (OLD, OLD))
    assert tree_hash(tree) == before


def test_absolute_path_does_not_count(tree, tmp_path):
    before = tree_hash(tree)
    moved = tmp_path / "elsewhere" / "deeper" / "environment"
    moved.parent.mkdir(parents=True)
    shutil.move(tree, moved)
    assert tree_hash(moved) == before
    # A fresh copy (new inodes, new mtimes) as from a clone on another machine.
    copy = tmp_path / "clone" / "environment"
    shutil.copytree(moved, copy, symlinks=True)
    assert tree_hash(copy) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_owner_does_not_count(tree):
    before = tree_hash(tree)
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), 4321, 4321)
    assert tree_hash(tree) == before


def test_non_utf8_file_name(tmp_path):
    root = tmp_path / "environment"
    root.mkdir()
    try:
        (root / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n")
    except (OSError, UnicodeError):
        pytest.skip("this filesystem refuses non-UTF-8 names")
    first = tree_hash(root, {})
    (root / os.fsdecode(b"caf\xe9.txt")).rename(root / os.fsdecode(b"caf\xe8.txt"))
    assert tree_hash(root, {}) != first


def test_missing_root_is_empty(tmp_path):
    assert tree_entries(tmp_path / "nope", "judge", {}, HashCache()) == []


# ---------------------------------------------------------------------------- hash cache


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every file the hashing module reads."""
    seen: list[str] = []
    real = sforge.benchmark.hashing.file_sha256

    def counting(path):
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(sforge.benchmark.hashing, "file_sha256", counting)
    return seen


def test_cache_second_hash_reads_nothing(tree, reads):
    set_mtime(tree, OLD)  # as after a checkout some time ago
    cache = HashCache()
    first = tree_hash(tree, cache=cache)
    assert sorted(Path(r).name for r in reads) == ["Dockerfile", "main.c", "run.sh"]
    reads.clear()
    assert tree_hash(tree, cache=cache) == first
    assert reads == []


def test_cache_rereads_changed_file_with_same_size_and_mtime(tree, reads):
    path = tree / "src" / "main.c"
    set_mtime(tree, OLD)
    cache = HashCache()
    first = tree_hash(tree, cache=cache)
    st = path.stat()
    # Let the clock move past the filesystem's timestamp granularity, so ctime must differ.
    time.sleep(0.05)
    with path.open("r+") as fh:  # in place: same inode
        fh.write("INT")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    st2 = path.stat()
    assert (st2.st_size, st2.st_mtime_ns, st2.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert st2.st_ctime_ns != st.st_ctime_ns
    reads.clear()
    second = tree_hash(tree, cache=cache)
    assert reads == [str(path)]
    assert second != first
    assert second == tree_hash(tree)  # what an uncached hash says


def test_cache_rereads_replaced_file(tree, reads):
    """An editor's save by rename: same size and mtime, but a new inode."""
    path = tree / "src" / "main.c"
    set_mtime(tree, OLD)
    cache = HashCache()
    first = tree_hash(tree, cache=cache)
    st = path.stat()
    tmp = tree / "src" / ".main.c.swp"
    tmp.write_text(path.read_text().replace("return 0", "return 7"))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)
    assert path.stat().st_ino != st.st_ino
    reads.clear()
    assert tree_hash(tree, cache=cache) != first
    assert reads == [str(path)]


def test_cache_does_not_keep_racily_clean_files(tmp_path, reads):
    """A file modified just now could change again within one timestamp tick, unseen by
    stat: it is hashed every time until its mtime is safely in the past."""
    path = tmp_path / "fresh.txt"
    path.write_text("fresh\n")
    cache = HashCache(tmp_path / "cache.json")
    assert cache.sha256(path) == cache.sha256(path)
    assert len(reads) == 2
    cache.save()
    assert not (tmp_path / "cache.json").exists()  # nothing worth saving
    os.utime(path, (OLD, OLD))
    cache.sha256(path)
    cache.sha256(path)
    assert len(reads) == 3


def test_cache_persists(tree, tmp_path, reads):
    set_mtime(tree, OLD)
    path = tmp_path / "cache" / "hashes.json"
    cache = HashCache(path)
    first = tree_hash(tree, cache=cache)
    assert reads
    cache.save()
    data = json.loads(path.read_text())
    assert data["version"] == HashCache.VERSION
    assert len(data["entries"]) == 3
    reads.clear()
    reloaded = HashCache(path)
    assert tree_hash(tree, cache=reloaded) == first
    assert reads == []


def test_cache_save_without_path_or_changes(tmp_path, tree):
    set_mtime(tree, OLD)
    HashCache().save()  # no path: nothing to do, no error
    path = tmp_path / "hashes.json"
    cache = HashCache(path)
    cache.save()
    assert not path.exists()  # nothing hashed, nothing written
    tree_hash(tree, cache=cache)
    cache.save()
    mtime = path.stat().st_mtime_ns
    tree_hash(tree, cache=cache)  # all hits
    cache.save()
    assert path.stat().st_mtime_ns == mtime


DAMAGED = {
    "truncated": '{"version": 1, "entries": {"/x": [1, 2',
    "empty": "",
    "binary": b"\x00\xff\xfe garbage".decode("latin-1"),
    "list": "[1, 2, 3]",
    "string": '"hashes"',
    "entries_list": '{"version": 1, "entries": []}',
    "entries_null": '{"version": 1, "entries": null}',
    "no_entries": '{"version": 1}',
    "bad_entry": '{"version": 1, "entries": {"@FILE@": 5}}',
    "short_entry": '{"version": 1, "entries": {"@FILE@": "@IDENT@"}}',
    # this version's shape, but a digest that is no sha256 (a cache edited by hand)
    "digest_number": '{"version": 3, "entries": {"@FILE@": "@IDENT_NUMBER@"}}',
    "digest_short": '{"version": 3, "entries": {"@FILE@": "@IDENT_SHORT@"}}',
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_damaged_cache_is_ignored(tmp_path, kind):
    f = tmp_path / "file.txt"
    f.write_text("content\n")
    os.utime(f, (OLD, OLD))
    st = f.stat()
    text = DAMAGED[kind].replace("@FILE@", str(f))
    # An entry whose stat identity matches but whose digest is missing.
    ident = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
    text = text.replace('"@IDENT@"', json.dumps(ident))
    text = text.replace('"@IDENT_NUMBER@"', json.dumps([*ident, 5]))
    text = text.replace('"@IDENT_SHORT@"', json.dumps([*ident, "abc"]))
    path = tmp_path / "hashes.json"
    path.write_text(text)
    cache = HashCache(path)
    assert cache.sha256(f) == file_sha256(f)
    cache.save()
    assert json.loads(path.read_text())["entries"][str(f)][4] == file_sha256(f)


def test_cache_of_another_version_is_ignored(tmp_path):
    """Entries of another cache version are never trusted, even when the stat matches."""
    f = tmp_path / "file.txt"
    f.write_text("content\n")
    os.utime(f, (OLD, OLD))
    st = f.stat()
    ident = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
    path = tmp_path / "hashes.json"
    path.write_text(json.dumps({"version": HashCache.VERSION + 1,
                                "entries": {str(f): [*ident, "0" * 64]}}))
    assert HashCache(path).sha256(f) == file_sha256(f)
    # The same entry under the current version is trusted: the cache only saves reads.
    path.write_text(json.dumps({"version": HashCache.VERSION,
                                "entries": {str(f): [*ident, "0" * 64]}}))
    assert HashCache(path).sha256(f) == "0" * 64


# ---------------------------------------------------------------------------- image tags

TASK_TOML = """id = "{id}"
version = "1.0.0"
category = "demo"
{env}
[judge]
cmd = "sh /judge/run.sh"
timeout_sec = 30
{blobs}"""


def write_task(root: Path, tid: str, base: str | None, blobs: str = "") -> None:
    d = root / "tasks" / tid
    (d / "environment").mkdir(parents=True)
    (d / "judge").mkdir()
    env = f'\n[environment]\nbase = "{base}"\n' if base else ""
    (d / "task.toml").write_text(TASK_TOML.format(id=tid, env=env, blobs=blobs))
    (d / "instruction.md").write_text(f"Do {tid}.\n")
    head = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n" if base else "FROM busybox:1.36\n"
    (d / "environment" / "Dockerfile").write_text(head + "COPY environment/ /w/\n")
    (d / "environment" / "README.md").write_text(f"workspace of {tid}\n")
    (d / "judge" / "Dockerfile").write_text(head + "COPY judge/ /judge/\n")
    (d / "judge" / "run.sh").write_text("#!/bin/sh\necho judged\n")


@pytest.fixture
def tiny_bench_dir(tmp_path) -> Path:
    """A benchmark written here: bases tiny (busybox) and other (debian), tasks a (with a
    blob), b on tiny, c on no base, d on other."""
    root = tmp_path / "bench"
    (root / "bases" / "tiny").mkdir(parents=True)
    (root / "bases" / "tiny" / "Dockerfile").write_text("FROM busybox:1.36\n")
    (root / "bases" / "other").mkdir(parents=True)
    (root / "bases" / "other" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "benchmark.toml").write_text('name = "tb"\n')
    write_task(root, "a", "tiny", blobs='\n[[blobs]]\npath = "judge/blobs/hidden.tar.gz"\n'
               f'sha256 = "{BLOB_SHA}"\n')
    write_task(root, "b", "tiny")
    write_task(root, "c", None)
    write_task(root, "d", "other")
    return root


def tags(root: Path) -> dict[str, str]:
    """Every image tag of the benchmark, as `kind/name` -> tag, computed from scratch."""
    bench = load_benchmark(root)
    assert bench.errors == []
    cache = HashCache()
    bases: dict = {}
    out = {}
    for task in bench.tasks.values():
        for kind, ref in task_refs(bench, task, cache, bases).items():
            out[f"{kind}/{task.id}"] = ref.tag
    for name, ref in bases.items():
        out[f"base/{name}"] = ref.tag
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    assert before.keys() == after.keys()
    return {k for k in before if before[k] != after[k]}


def test_tag_names(tiny_bench_dir):
    t = tags(tiny_bench_dir)
    assert set(t) == {"base/tiny", "base/other", "work/a", "judge/a", "work/b", "judge/b",
                      "work/c", "judge/c", "work/d", "judge/d"}
    for key, tag in t.items():
        kind, name = key.split("/")
        repo, h = tag.split(":")
        assert repo == f"tb.{kind}.{name}"
        assert len(h) == 12 and int(h, 16) >= 0
    # Each of a task's images has its own hash.
    assert t["work/a"] != t["judge/a"]


def test_refs_link_their_base(tiny_bench_dir):
    bench = load_benchmark(tiny_bench_dir)
    cache = HashCache()
    bases: dict = {}
    refs = task_refs(bench, bench.tasks["a"], cache, bases)
    assert refs["work"].base is bases["tiny"]
    assert refs["judge"].base == base_ref(bench, "tiny", HashCache())
    assert refs["work"].label == "work a"
    c = task_refs(bench, bench.tasks["c"], cache, bases)
    assert c["work"].base is None and c["judge"].base is None
    assert set(bases) == {"tiny"}  # bases are computed on demand, once


def test_judge_change_changes_only_judge_tag(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    run_sh = tiny_bench_dir / "tasks" / "b" / "judge" / "run.sh"
    run_sh.write_text(run_sh.read_text() + "# tweak\n")
    assert changed(before, tags(tiny_bench_dir)) == {"judge/b"}


def test_environment_change_changes_work_and_judge(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    (tiny_bench_dir / "tasks" / "b" / "environment" / "README.md").write_text("new\n")
    assert changed(before, tags(tiny_bench_dir)) == {"work/b", "judge/b"}


def test_base_change_changes_every_task_on_it(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    df = tiny_bench_dir / "bases" / "tiny" / "Dockerfile"
    df.write_text(df.read_text() + "RUN echo v2\n")
    assert changed(before, tags(tiny_bench_dir)) == {"base/tiny", "work/a", "judge/a", "work/b",
                                                 "judge/b"}


def test_base_file_added_changes_base(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    (tiny_bench_dir / "bases" / "other" / "tool.sh").write_text("echo\n")
    assert changed(before, tags(tiny_bench_dir)) == {"base/other", "work/d", "judge/d"}


def test_benchmark_name_is_part_of_every_tag(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    (tiny_bench_dir / "benchmark.toml").write_text('name = "tb2"\n')
    after = tags(tiny_bench_dir)
    assert all(after[k].startswith("tb2.") for k in after)
    # Tasks on a base change hash too (the base tag names the benchmark); tasks without
    # a base keep their hash under the new name.
    assert after["work/c"].split(":")[1] == before["work/c"].split(":")[1]
    assert after["work/a"].split(":")[1] != before["work/a"].split(":")[1]


def test_task_toml_and_instruction_change_nothing(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    toml = tiny_bench_dir / "tasks" / "a" / "task.toml"
    text = toml.read_text()
    text = text.replace('version = "1.0.0"', 'version = "2.0.0"')
    text = text.replace("timeout_sec = 30", "timeout_sec = 99")
    text = text.replace('category = "demo"', 'category = "other"\nstatus = "retired"')
    toml.write_text(text)
    (tiny_bench_dir / "tasks" / "a" / "instruction.md").write_text("Completely new prompt.\n")
    (tiny_bench_dir / "tasks" / "a" / "NOTES.md").write_text("author notes\n")
    assert tags(tiny_bench_dir) == before


def test_judge_blob_sha_changes_only_judge_tag(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    toml = tiny_bench_dir / "tasks" / "a" / "task.toml"
    toml.write_text(toml.read_text().replace(BLOB_SHA, "cd" * 32))
    assert changed(before, tags(tiny_bench_dir)) == {"judge/a"}


def test_fetching_a_blob_changes_no_tag(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    blob = tiny_bench_dir / "tasks" / "a" / "judge" / "blobs" / "hidden.tar.gz"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"whatever the bytes are")
    assert tags(tiny_bench_dir) == before


def test_environment_blob_changes_work_and_judge(tiny_bench_dir):
    toml = tiny_bench_dir / "tasks" / "b" / "task.toml"
    before = tags(tiny_bench_dir)
    toml.write_text(toml.read_text() + '\n[[blobs]]\npath = "environment/blobs/data.tar.gz"\n'
                    f'sha256 = "{BLOB_SHA}"\n')
    mid = tags(tiny_bench_dir)
    assert changed(before, mid) == {"work/b", "judge/b"}
    bench = load_benchmark(tiny_bench_dir)
    assert [b.path for b in context_blobs(bench.tasks["b"], "work")] == [
        "environment/blobs/data.tar.gz"]
    assert [b.path for b in context_blobs(bench.tasks["a"], "work")] == []
    assert [b.path for b in context_blobs(bench.tasks["a"], "judge")] == [
        "judge/blobs/hidden.tar.gz"]


def test_task_without_base(tiny_bench_dir):
    before = tags(tiny_bench_dir)
    # Its hash does not depend on any base.
    df = tiny_bench_dir / "bases" / "tiny" / "Dockerfile"
    df.write_text("FROM alpine:3\n")
    after = tags(tiny_bench_dir)
    assert after["work/c"] == before["work/c"] and after["judge/c"] == before["judge/c"]
    # Moving a task onto a base changes its tags (same files, now with a base tag).
    toml = tiny_bench_dir / "tasks" / "c" / "task.toml"
    toml.write_text(toml.read_text().replace("[judge]", '[environment]\nbase = "tiny"\n\n[judge]'))
    moved = tags(tiny_bench_dir)
    assert moved["work/c"] != after["work/c"] and moved["judge/c"] != after["judge/c"]


def test_same_benchmark_in_two_places_has_same_tags(tiny_bench_dir, tmp_path):
    before = tags(tiny_bench_dir)
    clone = tmp_path / "clone" / "bench"
    shutil.copytree(tiny_bench_dir, clone, symlinks=True)
    set_mtime(clone, time.time() + 5)
    assert tags(clone) == before


def test_folder_cache_saves_only_the_folders_asked_about_since_its_last_save(tmp_path,
                                                                             monkeypatch):
    """A listing saves after each folder: with 1,000 folders, saving every folder loaded so
    far each time was 500,000 saves; each folder's new hashes must still be kept."""
    monkeypatch.setattr(HashCache, "RACY_NS", -1)
    cache = sforge.benchmark.hashing.FolderHashCache(tmp_path / "cache")
    files = []
    for i in range(4):
        (tmp_path / f"f{i}").mkdir()
        files.append(tmp_path / f"f{i}" / "a.tar")
        files[-1].write_bytes(b"%d" % i)
    saved: list[Path | None] = []
    real = HashCache.save

    def save(self: HashCache) -> None:
        saved.append(self.path)
        real(self)

    monkeypatch.setattr(HashCache, "save", save)
    for path in files:
        cache.sha256(path)
        cache.save()
    assert len(saved) == len(files) == len(set(saved))  # each folder once, when it was asked
    cache.save()
    assert len(saved) == len(files)
    files[0].write_bytes(b"changed")
    cache.sha256(files[0])
    cache.save()
    assert len(saved) == len(files) + 1
    fresh = sforge.benchmark.hashing.FolderHashCache(tmp_path / "cache")
    monkeypatch.setattr(sforge.benchmark.hashing, "file_sha256", lambda p: pytest.fail(f"{p} read"))
    assert [fresh.sha256(p) for p in files] == [cache.sha256(p) for p in files]
