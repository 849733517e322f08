"""What a command's start and end cost is cut without changing what it does: YAML parses
remembered by content, run commands' options defined only when asked for, small JSON read
without orjson, the kernel copying unchanged rows, compiled templates kept (no Docker)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
import yaml

from sforge.cli import main as cli
from sforge.core import config, fileio
from sforge.report.pages import environment

PLAIN = "a: 1\nb: [x, {c: 2.5}]\nd: null\n"


def test_yaml_is_parsed_once_per_text_and_each_call_gets_its_own_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = yaml.safe_load(PLAIN)
    first = config.safe_yaml(PLAIN)
    assert first == expected
    first["a"] = 99  # a caller's change is its own
    monkeypatch.setattr(yaml, "load", lambda *a, **k: pytest.fail("parsed again"))
    again = config.safe_yaml(PLAIN)
    assert again == expected and again is not first
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.safe_yaml(PLAIN + "e: 3\n")["e"] == 3  # another text: parsed


@pytest.mark.parametrize("text", ["when: 2026-12-03\n", "1: one\n", "x: .nan\n"])
def test_yaml_that_json_cannot_keep_is_parsed_every_time(tmp_path, monkeypatch, text):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = yaml.safe_load(text)
    calls = []
    real = yaml.load
    monkeypatch.setattr(yaml, "load", lambda *a, **k: calls.append(1) or real(*a, **k))
    for _ in range(2):
        got = config.safe_yaml(text)
        assert repr(got) == repr(expected)  # the date stays a date, 1 an int key, NaN NaN
    assert len(calls) == 2


def test_a_broken_or_unwritable_yaml_memory_only_costs_the_parse(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    memory = fileio.user_cache("yaml.json")
    memory.parent.mkdir(parents=True)
    memory.write_text("{not json")
    assert config.safe_yaml(PLAIN) == yaml.safe_load(PLAIN)
    memory.unlink()
    memory.parent.rmdir()
    memory.parent.parent.joinpath("sforge").write_text("not a directory")
    assert config.safe_yaml(PLAIN) == yaml.safe_load(PLAIN)


@pytest.mark.parametrize(("argv", "command"), [
    (["eval", "--task", "t"], "eval"),
    (["-b", "run", "list"], "list"),                # a benchmark directory named run
    (["--bench", "runs", "report"], "report"),      # an abbreviated long option
    (["--results=run", "grade"], "grade"),
    (["-vb", "agents", "eval"], "eval"),            # clustered short options
    (["-v", "run", "--agent", "x"], "run"),
    (["--help"], None),
    ([], None),
])
def test_command_named_finds_the_command_as_argparse_does(argv, command):
    assert cli.command_named(argv) == command


def test_run_commands_are_listed_always_and_defined_only_when_asked(monkeypatch):
    monkeypatch.delitem(sys.modules, "sforge.cli.runs", raising=False)
    args = cli.build_parser(["-b", "run", "list"]).parse_args(["-b", "run", "list"])
    assert args.command == "list" and args.benchmark == "run"
    assert "sforge.cli.runs" not in sys.modules  # `run`'s options were not defined
    text = cli.build_parser(["--help"]).format_help()
    for name in ("run", "runs", "agents", "eval", "report"):
        assert f"    {name} " in text, name
    args = cli.build_parser(["run", "--agent", "x"]).parse_args(["run", "--agent", "x"])
    assert args.agent == "x" and callable(args.func)


@pytest.mark.parametrize("blob", [b'{"a": [1, 2.5, "x"]}', b'{"n": NaN, "i": Infinity}',
                                  b'{"a": 1, "a": 2}', b'[18446744073709551615, -1e308]'])
def test_small_and_bulk_json_reads_agree(blob):
    small, bulk = fileio.loads_json(blob), fileio.loads_json(blob, bulk=True)
    assert repr(small) == repr(bulk) == repr(json.loads(blob))
    big = b"[" + b",".join([blob] * 5000) + b"]"  # over the size orjson is used for
    assert repr(fileio.loads_json(big)) == repr(json.loads(big))


def test_an_integer_beyond_64_bits_is_exact_in_a_one_off_read():
    blob = b'{"big": 123456789012345678901234567890}'
    assert fileio.loads_json(blob) == {"big": 123456789012345678901234567890}
    assert fileio.loads_json(blob, bulk=True) == {"big": 1.2345678901234568e29}  # orjson's


def test_copy_range_copies_by_the_kernel_or_by_hand(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.write_bytes(bytes(range(256)) * 9000)  # over one read of the fallback
    data = src.read_bytes()

    def copy(name: str, offset: int, size: int) -> bytes:
        out = tmp_path / name
        with open(src, "rb") as s, open(out, "wb") as d:
            d.write(b"head")
            d.flush()
            fileio.copy_range(s.fileno(), d.fileno(), offset, size)
        return out.read_bytes()

    assert copy("kernel", 1000, 2_000_000) == b"head" + data[1000:2_001_000]

    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    assert copy("by-hand", 7, 1_500_000) == b"head" + data[7:1_500_007]
    with pytest.raises(OSError, match="early"):
        copy("short", len(data) - 10, 20)  # the input changed under us
    monkeypatch.undo()
    with pytest.raises(OSError, match="early"):
        copy("short-kernel", len(data) - 10, 20)


def test_compiled_templates_are_kept_and_an_unwritable_cache_still_renders(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    html = environment().get_template("base.html.j2").render(index="x.html")
    kept = list((tmp_path / "cache" / "sforge").glob("templates-*/*.cache"))
    assert kept, "no compiled template kept"
    assert environment().get_template("base.html.j2").render(index="x.html") == html
    (tmp_path / "ro").write_text("a file, not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ro"))
    assert environment().get_template("base.html.j2").render(index="x.html") == html


def test_the_sforge_command_keeps_its_exit_code(tmp_path):
    cmd = [sys.executable, "-m", "sforge", "-b", str(tmp_path / "missing"), "list"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 3 and "benchmark directory not found" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "sforge", "--version"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("sforge ")
