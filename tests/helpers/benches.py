"""Copies of fixture benchmarks under unique names, the CLI runner over a copy, and the
removal of a copy's images."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors


@dataclass
class Sforge:
    """A copy of a fixture benchmark under a unique name, and a runner for the CLI."""

    bench: Path
    results: Path
    name: str

    def run(self, *args: str, check: bool = False, env: dict | None = None,
            bench: Path | None = None, results: Path | None = None,
            stdin: bytes | None = None) -> subprocess.CompletedProcess:
        """`python -m sforge -b BENCH --results RESULTS ARGS` from the folder above the copy;
        check: raise with its output when it fails."""
        cmd = [sys.executable, "-m", "sforge", "-b", str(bench or self.bench),
               "--results", str(results or self.results), *args]
        proc = subprocess.run(cmd, capture_output=True, input=stdin,
                              env={**os.environ, **(env or {})}, cwd=self.bench.parent)
        proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n"
                                 f"{proc.stderr}")
        return proc

    def sentinels(self) -> dict[str, Path]:
        """The newest sentinel of each image (older hashes stay on disk, unasked for)."""
        root = self.results / self.name / "images"
        paths = sorted(root.glob("*/*/*.json"), key=lambda p: p.stat().st_mtime_ns)
        return {f"{p.parent.parent.name}/{p.parent.name}": p for p in paths}


def copy_bench(src: Path, dest: Path) -> str:
    """Copy a fixture benchmark, renamed so that its images never collide with another test's."""
    shutil.copytree(src, dest, symlinks=True)
    name = f"t{uuid.uuid4().hex[:8]}"
    toml = dest / "benchmark.toml"
    text = toml.read_text()
    toml.write_text("\n".join(f'name = "{name}"' if line.startswith("name") else line
                              for line in text.splitlines()) + "\n")
    return name


def remove_images(client: docker.DockerClient, prefix: str) -> None:
    """Remove this test's images by tag (one listing: others' images come and go meanwhile)."""
    for image in client.api.images():
        for tag in image.get("RepoTags") or []:
            if tag.startswith(f"{prefix}."):
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_image(tag, force=True)


def results_of(sf: Sforge) -> dict[str, int]:
    """The eval result files of a copy → their mtime in ns (which were written, or rewritten)."""
    return {p.name: p.stat().st_mtime_ns
            for p in (sf.results / sf.name / "evals").glob("*/*.json")}
