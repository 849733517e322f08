"""Agent bundles: everything an agent needs, prepared once on the host from package registries
(npm's native-binary packages, Debian's musl loader and bash-static), kept in a cache under a
content hash, and mounted read-only into work containers. Nothing is installed inside a
container, and no container needs the network to get its agent.

The bundle's name hashes what goes into it (each item's source and destination, host files
by content, the script agent's script), so a changed definition is a new bundle and an
unchanged one is made once per machine. Downloads are kept separately, so re-assembling after
a definition edit does not fetch the 360 MB claude package again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from sforge.benchmark.hashing import TAG_HEX, file_sha256
from sforge.core.clock import now_iso
from sforge.core.errors import InfrastructureError, SforgeError
from sforge.core.fileio import atomic_write_json, exclusive
from sforge.runs.agents import Agent, BundleItem

MANIFEST = "bundle.json"


def cache_root() -> Path:
    """$SFORGE_CACHE, else ~/.cache/sforge: shared by every results directory on the machine."""
    return Path(os.environ.get("SFORGE_CACHE") or Path.home() / ".cache" / "sforge")


def downloads_dir() -> Path:
    """Where downloaded bundle sources (npm tarballs) are cached, shared across runs."""
    return cache_root() / "downloads"


def _host_file(agent: Agent, item: BundleItem) -> Path:
    path = Path(item.host or "")
    if not path.is_file():
        how = f" (apt-get install {item.debian}; scripts/setup.sh does)" if item.debian else ""
        raise SforgeError(f"{agent.path}: bundle file {item.host} is missing on this host{how}")
    return path


def bundle_digest(agent: Agent, script: Path | None = None) -> str:
    """Hash of what the bundle is made of: sources by name@version or content."""
    h = hashlib.sha256()
    parts: list[object] = [agent.name]
    for item in agent.bundle:
        src = file_sha256(_host_file(agent, item)) if item.host else f"{item.npm}:{item.member}"
        parts.append([item.to, src])
    if agent.script:
        if script is None:
            raise SforgeError(f"agent {agent.name} runs a script: give --script FILE")
        if not script.is_file():
            raise SforgeError(f"--script {script}: no such file")
        parts.append(["script.sh", file_sha256(script)])
    h.update(json.dumps(parts, sort_keys=True).encode())
    return h.hexdigest()[:TAG_HEX]


def bundle_dir(agent: Agent, digest: str) -> Path:
    """The cached bundle of `agent` whose sources hash to `digest`."""
    return cache_root() / "agents" / f"{agent.name}-{digest}"


def npm_tarball(spec: str) -> Path:
    """`npm pack package@version` into the download cache, once."""
    name = spec.lstrip("@").replace("/", "-").replace("@", "-") + ".tgz"
    dest = downloads_dir() / name
    if dest.is_file():
        return dest
    npm = shutil.which("npm")
    if npm is None:
        raise InfrastructureError(f"npm is needed once to fetch {spec} (apt-get install npm; "
                                  "scripts/setup.sh does)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".npm.") as tmp:
        proc = subprocess.run([npm, "pack", spec, "--silent", "--pack-destination", tmp],
                              capture_output=True, text=True)
        got = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(got) != 1:
            raise InfrastructureError(f"npm pack {spec} failed: {proc.stderr.strip()[-500:]}")
        os.replace(got[0], dest)
    return dest


def _extract_member(tgz: Path, member: str, dest: Path) -> None:
    with tarfile.open(tgz, "r:gz") as tar:
        for info in tar:
            if info.name == member and info.isfile():
                src = tar.extractfile(info)
                assert src is not None
                with dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                os.chmod(dest, 0o755 if info.mode & 0o111 else 0o644)
                return
    raise SforgeError(f"{tgz.name} has no file {member}")


def ensure_bundle(agent: Agent, script: Path | None = None) -> Path:
    """The agent's bundle directory, assembled first when this machine has none."""
    digest = bundle_digest(agent, script)
    final = bundle_dir(agent, digest)
    if (final / MANIFEST).is_file():
        return final
    with exclusive(final.with_name(f".{final.name}.lock")):
        if (final / MANIFEST).is_file():
            return final
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        try:
            files = {}
            for item in agent.bundle:
                dest = tmp / item.to
                dest.parent.mkdir(parents=True, exist_ok=True)
                if item.npm:
                    _extract_member(npm_tarball(item.npm), item.member or "", dest)
                else:
                    shutil.copyfile(_host_file(agent, item), dest)
                    os.chmod(dest, 0o755)
                files[item.to] = file_sha256(dest)
            if agent.script:
                assert script is not None
                shutil.copyfile(script, tmp / "script.sh")
                os.chmod(tmp / "script.sh", 0o755)
                files["script.sh"] = file_sha256(tmp / "script.sh")
            os.chmod(tmp, 0o755)
            atomic_write_json(tmp / MANIFEST, {
                "agent": agent.name, "digest": digest, "files": files,
                "prepared_at": now_iso()})
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def write_bundle_sentinel(agent: Agent, sentinel: Path, script: Path | None = None) -> Path:
    """The Snakemake target of a bundle: which directory holds it on this machine."""
    path = ensure_bundle(agent, script)
    manifest = json.loads((path / MANIFEST).read_text())
    atomic_write_json(sentinel, {**manifest, "path": str(path)})
    return path
