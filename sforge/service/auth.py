"""Tokens: random, shown once, stored only as sha256 hashes; the admin token from the
environment or a mode-0600 file made once, never a constant in the source."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from sforge.core.errors import SforgeError

ADMIN_ENV = "SFORGE_ADMIN_TOKEN"


def new_token() -> str:
    """A new random token (256 bits, URL-safe); shown once, stored only as its hash."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The hex sha256 of a token: what the state stores in its place."""
    return hashlib.sha256(token.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    """Whether two tokens are equal, compared in constant time."""
    return hmac.compare_digest(a.encode(), b.encode())


def admin_token(path: Path, env: Mapping[str, str] | None = None) -> str:
    """SFORGE_ADMIN_TOKEN, else the token in `path`, made (mode 0600) when absent."""
    env = os.environ if env is None else env
    if env.get(ADMIN_ENV):
        return env[ADMIN_ENV]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
    else:
        token = new_token()
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
    if not token:
        raise SforgeError(f"{path}: empty admin token file (delete it to make a new one)")
    return token
