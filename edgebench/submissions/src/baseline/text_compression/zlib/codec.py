"""Baseline: the standard library's zlib at its default level."""

import zlib


def compress(data: bytes) -> bytes:
    return zlib.compress(data)


def decompress(data: bytes) -> bytes:
    return zlib.decompress(data)
