"""The one planner: run flags as arguments, one build-concurrency setting, the fast path
through the rules' functions, and a workflow layer whose parsing changes nothing on disk."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sforge.cli.main import main
from sforge.commands.execution import Execution
from sforge.commands.images import build_images, build_independent
from sforge.core.config import user_config
from sforge.plan.pipeline import get_pipeline
from sforge.workflow import targets
from tests.helpers.benches import copy_bench
from tests.helpers.paths import FIXTURES, REPO


def _summary(text: str) -> str:
    return [ln for ln in text.splitlines() if "image(s):" in ln][-1]


@pytest.mark.docker
def test_force_is_an_argument_not_read_from_the_cached_pipeline(minibench, capsys):
    """One process (a service) builds, then builds with --force: the cached
    Pipeline was made without force, yet the second build must rebuild."""
    base = ["-b", str(minibench.bench), "--results", str(minibench.results)]
    assert main([*base, "build", "--task", "gamma"]) == 0
    assert "2 built" in _summary(capsys.readouterr().out)
    assert main([*base, "build", "--force", "--task", "gamma"]) == 0
    line = _summary(capsys.readouterr().out)
    assert "2 built, 0 already present" in line, line


@pytest.mark.docker
def test_fast_path_records_present_images_through_the_rules_function(minibench, monkeypatch):
    """An image already under its tag is recorded by make_image_target (the
    rule's function, with its hash check), never by a second code path."""
    minibench.run("build", "--task", "gamma", check=True)
    for path in minibench.sentinels().values():
        path.unlink()
    calls: list[str] = []
    real = targets.make_image_target

    def spy(pipe, output, **kw):  # type: ignore[no-untyped-def]
        calls.append(Path(output).parent.name + "/" + Path(output).parent.parent.name)
        return real(pipe, output, **kw)

    monkeypatch.setattr(targets, "make_image_target", spy)
    config = user_config(None, {"benchmark": str(minibench.bench),
                                "results": str(minibench.results)})
    out = build_images(get_pipeline(config), ["gamma"], force=False, push=False,
                       ex=Execution())
    assert not out.failed and out.reused == 2
    assert sorted(calls) == ["gamma/judge", "gamma/work"]


def test_cli_fast_path_never_builds_more_than_docker_builds(tmp_path, monkeypatch):
    """`-j 4` runs four jobs, but never more image builds than docker_builds."""
    copy_bench(FIXTURES / "minibench", tmp_path / "bench")
    config = user_config(None, {"benchmark": str(tmp_path / "bench"),
                                "results": str(tmp_path / "results"), "docker_builds": 1})
    pipe = get_pipeline(config)
    lock, running, peak = threading.Lock(), [0], [0]

    def fake(pipe, output, **kw):  # type: ignore[no-untyped-def]
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(targets, "make_image_target", fake)
    refs = pipe.images(None, kinds=("work", "judge"))
    build_independent(pipe, refs, 4, force=False, push=False)
    assert peak[0] == 1
    build_independent(get_pipeline(dict(config, docker_builds=3)), refs, 4, force=False,
                      push=False)
    assert peak[0] == 3


def _snakemake(*args: str, bench: Path, results: Path, config: tuple[str, ...] = ()
               ) -> subprocess.CompletedProcess:
    """Plain snakemake from the repository root, as the README shows it."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args, "--directory", str(results),
         "--config", f"benchmark={bench}", f"results={results}", *config],
        cwd=REPO, capture_output=True, text=True)


@pytest.mark.docker
def test_plain_snakemake_caps_builds_with_the_same_setting(minibench):
    """Plain `snakemake` (no profile, no --resources) gets docker_builds from
    config, as the CLI does; --resources still wins."""
    proc = _snakemake("images", "--cores", "4", bench=minibench.bench,
                      results=minibench.results, config=("docker_builds=1",))
    assert proc.returncode == 0, proc.stderr
    assert 'Resource("docker_builds", 1)' in proc.stderr, proc.stderr[-2000:]


@pytest.mark.docker
def test_parsing_deletes_nothing_and_verify_drops_stale_sentinels(minibench, docker_client):
    """`snakemake -n` with an image gone leaves its sentinel alone; the
    documented `sforge verify` drops it, and the next build remakes it."""
    minibench.run("build", "--task", "gamma", check=True)
    sentinel = minibench.sentinels()["judge/gamma"]
    docker_client.images.remove(json.loads(sentinel.read_text())["tag"], force=True)
    proc = _snakemake("images", "-n", "--cores", "1", bench=minibench.bench,
                      results=minibench.results)
    assert proc.returncode == 0, proc.stderr
    assert sentinel.exists()
    verified = minibench.run("verify", check=True)
    assert str(sentinel) in verified.stdout and "1 stale sentinel(s)" in verified.stdout
    assert not sentinel.exists()
    assert "1 built" in _summary(minibench.run("build", "--task", "gamma", check=True).stdout)


def test_rules_take_their_paths_from_layout_and_hand_output_on():
    """The rules name Layout's paths and pass `output` to the one function they call."""
    for smk in (REPO / "rules").glob("*.smk"):
        text = smk.read_text()
        assert "verify_sentinels" not in text and "unlink" not in text, smk
        for call in [ln.strip() for ln in text.splitlines() if ln.strip().startswith("T.")]:
            if "(" in call and call.split("(")[0] in ("T.make_image_target", "T.grade_target",
                                                    "T.fetch_blob_target",
                                                    "T.write_scores_target"):
                assert "output[0]" in call, (smk, call)
        assert '"images" /' not in text and '"evals" /' not in text, smk
