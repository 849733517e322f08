"""`sforge check --integrity`'s judge-link check (sforge.check.judge_links): no symlink of
the judge image in cwd through which a submitted file is written outside cwd."""

from __future__ import annotations

from dataclasses import replace

from sforge.benchmark.model import SubmissionRules
from sforge.check.judge_links import (
    escaping_links,
    judge_link_findings,
    link_findings,
    resolve,
)
from tests.helpers.git_images import file, fixture_task, folder, image, link


def _found(*members, paths: tuple[str, ...] = (".",), exclude: tuple[str, ...] = ()):
    task = fixture_task()  # cwd /home/workspace/t
    task = replace(task, submission=SubmissionRules(paths=paths, exclude=exclude))
    base = (folder("judge"), folder("judge/data"), file("judge/data/expected.txt", "42\n"),
            folder("usr"), folder("usr/lib"), link("lib", "usr/lib"),
            folder("home"), folder("home/workspace"), folder("home/workspace/t"))
    escaping = escaping_links(image(members=base + members), task.environment.cwd)
    return [f.message for f in link_findings(escaping, task)]


def test_links_are_followed_as_the_container_would():
    links = {"/lib": "usr/lib", "/a": "/b", "/b": "../a"}
    assert resolve("/lib/x", links) == "/usr/lib/x"
    assert resolve("/home/t/up", {"/home/t/up": "../../etc"}) == "/etc"
    assert resolve("/a/x", links) is None  # a loop
    # `..` climbs from where a link led, not from the link's own name
    assert resolve("/w/x", {"/w/x": "lib/../../etc", "/w/lib": "/usr/lib/deep"}) == "/usr/etc"


def test_a_cwd_that_is_itself_a_link_is_warned_about():
    found = escaping_links(image(members=(folder("judge"), folder("home"),
                                          folder("home/workspace"),
                                          link("home/workspace/t", "/judge"))),
                           "/home/workspace/t")
    [finding] = link_findings(found, replace(fixture_task(),
                                             submission=SubmissionRules(paths=(".",))))
    assert finding.severity == "warning" and "lands in /judge" in finding.message


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


class _Exports:
    """Just enough of a container engine to export one image, counting the exports."""

    def __init__(self, raw: bytes, image_id: str = "sha256:" + "a" * 64):
        self.raw, self.id, self.exports = raw, image_id, 0

    def image_id(self, tag: str) -> str:
        return self.id

    def create_container(self, spec) -> str:
        return "c1"

    def export_filesystem(self, cid: str):
        self.exports += 1
        yield self.raw

    def remove_container(self, cid: str) -> None:
        return None


def test_an_image_is_exported_once_per_id(tmp_path):
    """The links found are kept by image id and cwd: a second check of the same image reads
    no export; a rebuilt image (a new id) is read again."""
    task = replace(fixture_task(), submission=SubmissionRules(paths=(".",)))
    raw = image(members=(folder("judge"), folder("judge/data"), folder("home"),
                         folder("home/workspace"), folder("home/workspace/t"),
                         link("home/workspace/t/data", "/judge/data"))).getvalue()
    engine = _Exports(raw)
    first = judge_link_findings(engine, task, "j:1", tmp_path / "cache")
    again = judge_link_findings(engine, task, "j:1", tmp_path / "cache")
    assert [f.rule for f in first] == ["integrity-link"] and again == first
    assert engine.exports == 1
    engine.id = "sha256:" + "b" * 64
    judge_link_findings(engine, task, "j:1", tmp_path / "cache")
    assert engine.exports == 2
