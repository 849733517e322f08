"""`sforge check --integrity`'s PATH check (sforge.check.integrity.path_findings): the judge
image's PATH holds no folder a submission can write."""

from __future__ import annotations

from dataclasses import replace

from sforge.benchmark.model import SubmissionRules
from sforge.check.integrity import path_findings
from tests.helpers.git_images import fixture_task

SYSTEM = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _found(path: str | None, paths: tuple[str, ...] = (".",),
           exclude: tuple[str, ...] = ()) -> list[str]:
    task = fixture_task()  # cwd /home/workspace/t
    task = replace(task, submission=SubmissionRules(paths=paths, exclude=exclude))
    env = ["LANG=C.UTF-8"] + ([f"PATH={path}"] if path is not None else [])
    return [f.message for f in path_findings(task, env)]


def test_system_folders_and_folders_outside_cwd_pass():
    assert _found(SYSTEM) == []
    assert _found(f"/home/workspace/tools/bin:/home/workspace/t2/bin:{SYSTEM}") == []
    assert _found(None) == []


def test_a_folder_in_cwd_or_a_relative_entry_is_an_error():
    [msg] = _found(f"/home/workspace/t/bin:{SYSTEM}")
    assert "PATH holds /home/workspace/t/bin" in msg and "bin/sh" in msg
    [msg] = _found(f"node_modules/.bin:{SYSTEM}")
    assert "'node_modules/.bin', relative to cwd" in msg
    assert len(_found(f"{SYSTEM}:.:")) == 1  # "." and "" are both cwd: said once
    # a PATH folder above cwd: nothing submitted lands in it, only below it
    assert _found(f"/home/workspace:{SYSTEM}") == []


def test_a_relative_entry_is_an_error_whatever_the_paths():
    [msg] = _found(f"node_modules/.bin:{SYSTEM}", paths=("src",))
    assert "relative to cwd" in msg
    assert len(_found(f"../tools:{SYSTEM}", paths=("src",))) == 1


def test_a_folder_no_submitted_file_reaches_passes():
    assert _found(f"/home/workspace/t/bin:{SYSTEM}", paths=("src",)) == []
    assert _found(f"/home/workspace/t/bin:{SYSTEM}", exclude=("bin",)) == []
    assert len(_found(f"/home/workspace/t/bin:{SYSTEM}", paths=("bin/tool.py",))) == 1
    # one command excluded by name: others still land there
    assert len(_found(f"/home/workspace/t/bin:{SYSTEM}", exclude=("bin/sh",))) == 1
    assert _found(f"/home/workspace/t/bin:{SYSTEM}", exclude=("bin/*",)) == []
