"""A work image's files as the engine exports them: read as a tar stream from a container
that is created and never started, so none of the image's own code runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sforge.containers.engine import ContainerEngine, ContainerSpec
from sforge.core.errors import InfrastructureError


class ChunkReader:
    """A file object over an iterator of byte chunks: what tarfile's stream mode reads."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buf = b""

    def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes (all that is left when `n` < 0), pulling chunks as needed."""
        while n < 0 or len(self._buf) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out


@contextlib.contextmanager
def exported(engine: ContainerEngine, tag: str, label: str) -> Iterator[ChunkReader]:
    """The image's filesystem as an uncompressed tar stream (container removed after)."""
    spec = ContainerSpec(image=tag, command=("/sforge-never-started",), cwd="/", env={},
                         labels={"sforge.integrity": label}, cpus=0, memory=0)
    cid = engine.create_container(spec)
    try:
        yield ChunkReader(iter(engine.export_filesystem(cid)))
    finally:
        with contextlib.suppress(InfrastructureError):
            engine.remove_container(cid)
