"""The container engine sforge talks to: one interface (this module), one Docker
implementation (sforge.containers.docker).

Everything above speaks of tags, build contexts and ContainerSpecs. Judges, game servers, runs'
work containers, an import's reference solution, the stale-container sweep and `sforge doctor`
make every container call through ContainerEngine; only the implementation imports the docker
SDK (a test checks), and it turns Docker's errors into InfrastructureError (EngineError for
container calls) with a message that names the image.
"""

from __future__ import annotations

import logging
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from sforge.core.errors import InfrastructureError, SforgeError

log = logging.getLogger(__name__)


# -- containers --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mount:
    """A host path bound into a container."""

    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    """One container as sforge asks for it: what runs, its limits, lockdown and labels."""

    image: str
    command: tuple[str, ...]  # the entrypoint (argv); the image's CMD is not used
    cwd: str
    env: dict[str, str]
    labels: dict[str, str]
    cpus: float
    memory: int  # bytes; swap is not added on top
    network: str = "none"  # "none" | "bridge"
    init: bool = True  # PID 1 is a tiny init, so killing the container ends every process
    cap_add: tuple[str, ...] = ()  # every other capability is dropped
    no_new_privileges: bool = True
    pids: int | None = None
    writable: str | None = None  # bound on the writable layer, where the daemon can apply it
    keep_output: bool = False  # the daemon keeps output (bounded) to read later; else read live
    stdin: bool = False  # an open stdin, for a line protocol over attach_stdio
    mounts: tuple[Mount, ...] = ()
    drop_caps: bool = True  # False: Docker's default capabilities (a work container's agent)
    name: str | None = None
    log_max: str = "64m"  # json-file size bound of kept output (keep_output)


@dataclass(frozen=True)
class ContainerFile:
    """What sits at a path inside a container: kind ("file", "dir", "symlink", "other",
    "too large") and, for a regular file within the cap, its bytes."""

    kind: str
    data: bytes = b""


class EngineError(InfrastructureError):
    """A container call failed; `unreachable` when the engine itself could not be reached."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


class ImageMissing(EngineError):
    """The engine holds no image under the name a container was asked of."""


class ExtractConflict(SforgeError):
    """An archive collides with the container's files (a directory where the image has a
    file, …): a verdict about the archive, not engine trouble."""


class ContainerEngine(ABC):
    """Images (build, tags, registry) and the container calls of a judge's or a game's life."""

    @abstractmethod
    def existing_tags(self, tags: Iterable[str]) -> set[str]:
        """Which of `tags` the daemon holds, in one call."""

    @abstractmethod
    def image_id(self, tag: str) -> str | None:
        """The id of the image under `tag`; None when the engine holds no such image."""

    @abstractmethod
    def tags_with_prefix(self, prefix: str) -> dict[str, int]:
        """Local tags whose repository starts with `prefix`, each with its image's size."""

    @abstractmethod
    def remove_tag(self, tag: str) -> None:
        """Untag (and delete, when it was the last tag) one image, by tag, never by id."""

    @abstractmethod
    def registry_has(self, remote: str) -> bool:
        """Whether the registry holds `remote` (a manifest check, no pull); RegistryError
        when the registry cannot answer."""

    def image_tags(self, ref: str) -> list[str]:
        """Every tag the engine holds for the image `ref` names (a name:tag, an id or a
        digest); [] when it holds no such image."""
        return []

    @abstractmethod
    def image_env(self, ref: str) -> list[str] | None:
        """The image's configured environment ("NAME=value"), None when there is no such
        image."""

    @abstractmethod
    def push(self, local: str, remote: str) -> None:
        """Push the local image `local` as `remote`; RegistryError when refused."""

    @abstractmethod
    def pull(self, remote: str, local: str) -> None:
        """Pull `remote` and keep it under the tag `local` only; RegistryError when refused."""

    @abstractmethod
    def build(self, context: IO[bytes], dockerfile: str, tag: str, buildargs: dict[str, str],
              platform: str | None, on_line: Callable[[str], None]) -> str:
        """Build from a tar context; return the image id. Raises BuildFailed."""

    @property
    @abstractmethod
    def daemon(self) -> str:
        """Where the engine is (for messages): a socket path or a URL."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """The daemon's own record (Name, ServerVersion, Images, DockerRootDir, …)."""

    @property
    def shares_files(self) -> bool:
        """Whether a path of this machine can be bound into the engine's containers (a local
        daemon); a caller must still cope with a mount that turns out empty."""
        return False

    @property
    def bounds_writable(self) -> bool:
        """Whether a container's writable layer may be bounded here (ContainerSpec.writable):
        True until the engine refused such a bound. A bound is only worth something where
        no unbounded host directory is mounted writable beside it."""
        return True

    @abstractmethod
    def create_container(self, spec: ContainerSpec) -> str:
        """Create (not start) a container; → its id. Raises ImageMissing."""

    @abstractmethod
    def put_archive(self, cid: str, path: str, data: bytes | IO[bytes]) -> None:
        """Extract an uncompressed tar at `path` (created when missing) in the container.
        Raises ExtractConflict when the archive collides with the container's files."""

    @abstractmethod
    def attach_output(self, cid: str) -> Iterator[bytes]:
        """stdout+stderr from the first byte: attach before `start`."""

    @abstractmethod
    def attach_stdio(self, cid: str) -> tuple[Any, socket.socket]:
        """A raw stdin/stdout channel (framed as Docker frames it); → (owner, socket): close
        both when done."""

    @abstractmethod
    def exec_start(self, cid: str, command: list[str], env: dict[str, str] | None = None,
                   workdir: str | None = None,
                   timeout: float | None = None) -> tuple[str, Iterator[bytes]]:
        """Run `command` in the running container; → (exec id, its stdout+stderr until it
        exits or the container stops). `timeout`: longest silence on the stream."""

    @abstractmethod
    def exec_state(self, eid: str) -> dict[str, Any]:
        """The exec's record: Running, ExitCode (None while it runs)."""

    @abstractmethod
    def start(self, cid: str) -> None:
        """Start a created container."""

    @abstractmethod
    def wait(self, cid: str, timeout: float) -> int | None:
        """The exit code, or None when `timeout` seconds passed first."""

    @abstractmethod
    def kill(self, cid: str) -> None:
        """SIGKILL; nothing when it already exited."""

    @abstractmethod
    def container_state(self, cid: str) -> dict[str, Any]:
        """The engine's state record (ExitCode, OOMKilled, …)."""

    @abstractmethod
    def read_file(self, cid: str, path: str, cap: int) -> ContainerFile | None:
        """What is at `path` (None: nothing); a regular file's bytes up to `cap`."""

    def export_filesystem(self, cid: str) -> Iterator[bytes]:
        """The container's whole filesystem as an uncompressed tar stream, in chunks (read
        from the engine: nothing runs in the container, which need not be started)."""
        raise EngineError(f"{type(self).__name__} cannot export a container's filesystem")

    @abstractmethod
    def output(self, cid: str) -> Iterator[bytes]:
        """The output the engine kept (ContainerSpec.keep_output)."""

    @abstractmethod
    def remove_container(self, cid: str) -> bool:
        """Force-remove; False when it was already gone or another caller is removing it."""

    @abstractmethod
    def containers(self, *labels: str) -> list[tuple[str, dict[str, str]]]:
        """(id, labels) of every container, running or not, that carries all `labels`
        ("name" or "name=value")."""


class RegistryError(InfrastructureError):
    """The registry refused or could not be reached; the message names the image."""
