"""`sforge check --integrity`'s judge-link check (sforge.check.judge_links): no symlink of
the judge image in cwd through which a submitted file is written outside cwd."""

from __future__ import annotations

from dataclasses import replace

from sforge.benchmark.model import SubmissionRules
from sforge.check.judge_links import link_findings, resolve
from tests.helpers.git_images import file, fixture_task, folder, image, link


def _found(*members, paths: tuple[str, ...] = (".",), exclude: tuple[str, ...] = ()):
    task = fixture_task()  # cwd /home/workspace/t
    task = replace(task, submission=SubmissionRules(paths=paths, exclude=exclude))
    base = (folder("judge"), folder("judge/data"), file("judge/data/expected.txt", "42\n"),
            folder("usr"), folder("usr/lib"), link("lib", "usr/lib"),
            folder("home"), folder("home/workspace"), folder("home/workspace/t"))
    return [f.message for f in link_findings(image(members=base + members), task)]


def test_links_are_followed_as_the_container_would():
    links = {"/lib": "usr/lib", "/a": "/b", "/b": "../a"}
    assert resolve("/lib/x", links) == "/usr/lib/x"
    assert resolve("/home/t/up", {"/home/t/up": "../../etc"}) == "/etc"
    assert resolve("/a/x", links) is None  # a loop


def test_a_link_to_a_folder_outside_cwd_is_an_error():
    [msg] = _found(link("home/workspace/t/data", "/judge/data"))
    assert "/home/workspace/t/data -> /judge/data" in msg and "/judge/data/<file>" in msg
    [msg] = _found(link("home/workspace/t/up", "../../../judge"))  # relative, escaping
    assert "to /judge/<file>" in msg
    [msg] = _found(link("home/workspace/t/libs", "/lib"))  # through another link
    assert "to /usr/lib/<file>" in msg


def test_harmless_links_pass():
    assert _found(link("home/workspace/t/exp", "/judge/data/expected.txt")) == []  # a file
    assert _found(folder("home/workspace/t/src"), link("home/workspace/t/s", "src")) == []
    assert _found(link("home/workspace/t/gone", "/nowhere")) == []  # dangling: made a file
    assert _found(link("opt/data", "/judge/data")) == []  # outside cwd
    assert _found(link("home/workspace/t/data", "/judge/data"), paths=("answer.txt",)) == []
    assert _found(link("home/workspace/t/data", "/judge/data"), exclude=("data",)) == []
