"""The tasks of fixtures/import that fit sforge, and the format each is written in."""

from __future__ import annotations

FITS = {"hello-world": "harbor", "hello-file": "terminal-bench", "shared-acl": "terminal-bench"}
