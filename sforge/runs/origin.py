"""The model API a run's proxy forwards to: one origin (scheme://host[:port]), optionally
under one path prefix (a gateway's), and nothing else."""

from __future__ import annotations

from urllib.parse import urlsplit

from sforge.core.errors import SforgeError


def check_api_url(url: str, what: str = "--model-api") -> str:
    """`url` without a trailing slash, or SforgeError saying what is expected: no query,
    fragment or user:password (it would land in spec.json), http or https only."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        raise SforgeError(f"{what} {url!r}: {exc}; expected scheme://host[:port][/path]") \
            from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment or "@" in parts.netloc:
        raise SforgeError(f"{what} {url!r}: expected http(s)://host[:port][/path] (no "
                          "query, fragment or credentials: the key comes from the host's "
                          "environment)")
    return url.rstrip("/")
