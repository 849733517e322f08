"""Request bodies read with a cap: a body over it is refused (413) as soon as its
Content-Length says so, or once that many bytes have arrived, so no client makes the
service hold more than the cap in memory or on disk."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

from starlette.requests import Request


async def capped(request: Request, limit: int,
                 too_big: Callable[[], Exception]) -> AsyncGenerator[bytes, None]:
    """The body's chunks; `too_big()` is raised past `limit` bytes."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big()
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise too_big()
        yield chunk


async def read_capped(request: Request, limit: int,
                      too_big: Callable[[], Exception]) -> bytes:
    """The whole body, refused with `too_big()` past `limit` bytes."""
    return b"".join([chunk async for chunk in capped(request, limit, too_big)])
