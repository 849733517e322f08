"""Here-documents in Dockerfiles: the classic builder sforge uses here (Debian's docker.io
20.10, no buildx; its BuildKit frontend predates heredocs) fails on them, so `sforge check`
and the build refuse them with file and line; and check's parser reads their bodies, so an
unpinned install inside one is still found."""

from __future__ import annotations

import shutil
from pathlib import Path

from sforge.benchmark.dockerfile import copy_args, parse_dockerfile, run_script
from sforge.check import check_benchmark, format_findings, simple_commands, tokenize_shell
from tests.helpers.benches import Sforge, copy_bench, remove_images
from tests.helpers.paths import REPO

EXAMPLE = REPO / "docs" / "first-task"

HEREDOCS = """FROM python:3.11-slim-bookworm
WORKDIR /work
RUN <<EOT
set -e
apt-get update
apt-get install -y --no-install-recommends foo \\
    bar=1.0
EOT
RUN python3 <<EOF
apt-get install not-shell
EOF
COPY <<-EOT /work/notes.txt
\thello
\tEOT
RUN echo done
"""


def _commands(text: str) -> list[list[tuple[str, int]]]:
    out = []
    for ins in parse_dockerfile(text):
        if ins.keyword == "RUN":
            out += [[(t.text, t.line) for t in cmd]
                    for cmd in simple_commands(tokenize_shell(run_script(ins)))]
    return out


def test_bodies_are_not_instructions_and_shell_bodies_are_commands():
    instructions = parse_dockerfile(HEREDOCS)
    assert [(i.keyword, i.line) for i in instructions] == [
        ("FROM", 1), ("WORKDIR", 2), ("RUN", 3), ("RUN", 9), ("COPY", 12), ("RUN", 15)]
    assert [d.word for d in instructions[2].heredocs] == ["EOT"]
    assert instructions[4].heredocs[0].body == [(13, "\thello")]  # <<- ends at a tabbed EOT
    commands = _commands(HEREDOCS)
    assert [("apt-get", 6), ("install", 6), ("-y", 6), ("--no-install-recommends", 6),
            ("foo", 6), ("bar=1.0", 7)] in commands
    assert all(w != "not-shell" for cmd in commands for w, _ in cmd)  # python's stdin
    assert copy_args(instructions[4]).sources == []  # an inline file, not a context path


def _bench(tmp_path: Path, dockerfile: str) -> Path:
    root = tmp_path / "mybench"
    shutil.copytree(EXAMPLE, root)
    (root / "tasks" / "reverse_lines" / "environment" / "Dockerfile").write_text(dockerfile)
    return root


def test_check_refuses_heredocs_and_finds_an_unpinned_install_inside(tmp_path: Path):
    root = _bench(tmp_path, HEREDOCS)
    dockerfile = root / "tasks" / "reverse_lines" / "environment" / "Dockerfile"
    findings = check_benchmark(root)
    got = sorted((f.rule, f.line, f.severity) for f in findings)
    assert got == [("apt-unpinned", 6, "error"), ("heredoc", 3, "error"),
                   ("heredoc", 9, "error"), ("heredoc", 12, "error")], format_findings(findings)
    assert all(f.file == dockerfile for f in findings)
    unpinned = next(f for f in findings if f.rule == "apt-unpinned")
    assert "'foo'" in unpinned.message
    assert "unknown instruction" in next(f for f in findings if f.rule == "heredoc").message


def test_build_refuses_a_heredoc_before_building(tmp_path: Path, docker_client):
    src = _bench(tmp_path / "src", "FROM python:3.11-slim-bookworm\nWORKDIR /work\n"
                 "RUN <<EOT\necho hi > /x\nEOT\n")
    name = copy_bench(src, tmp_path / "bench")
    sf = Sforge(tmp_path / "bench", tmp_path / "results", name)
    try:
        proc = sf.run("build")
        assert proc.returncode != 0
        out = proc.stdout + proc.stderr
        where = f"{tmp_path / 'bench' / 'tasks' / 'reverse_lines' / 'environment' / 'Dockerfile'}:3"
        assert where in out and "RUN <<EOT" in out, out
        assert not [t for i in docker_client.api.images() for t in i.get("RepoTags") or []
                    if t.startswith(f"{name}.work.")]
    finally:
        remove_images(docker_client, name)
