"""Unit: the one Dockerfile parser, as the build's leak check uses it (no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sforge.benchmark.dockerfile import copy_args, parse_dockerfile
from sforge.build.image import judge_leaks


@pytest.mark.parametrize("line", [
    "COPY judge/run.sh /leak.sh",
    "COPY ./judge /opt/j",
    "ADD --chown=1:1 judge/tests /t",
    'COPY ["judge/run.sh", "/leak.sh"]',
    'COPY --chown=1:1 ["./judge", "/opt/j"]',
    "COPY a.txt \\\n     judge/x /dst/",
])
def test_leak_found_in_every_form(tmp_path: Path, line: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM busybox:1.36\n{line}\n")
    leaks = judge_leaks(dockerfile)
    assert len(leaks) == 1 and leaks[0].startswith(f"{dockerfile}:2: ")


@pytest.mark.parametrize("line", [
    "COPY workspace /judge",  # judge as the destination is no leak
    'COPY ["workspace/a", "/judge/a"]',
    "RUN cp -r judge /x",  # not a build-context read
    "COPY judgement.txt /",
])
def test_no_leak(tmp_path: Path, line: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM busybox:1.36\n{line}\n")
    assert judge_leaks(dockerfile) == []


def test_copy_args_shell_and_json() -> None:
    shell, json_form, bad = parse_dockerfile(
        'COPY --chown=a:b x y /dst\nCOPY ["a b", "/d"]\nCOPY [not json\n')
    assert copy_args(shell).flags == ["--chown=a:b"]
    assert copy_args(shell).sources == ["x", "y"] and copy_args(shell).dest == "/dst"
    assert copy_args(json_form).sources == ["a b"] and copy_args(json_form).dest == "/d"
    assert copy_args(bad) is None
