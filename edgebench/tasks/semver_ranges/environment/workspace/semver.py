"""Semantic versions and version ranges: see README.md for the exact rules."""

from __future__ import annotations

from typing import NamedTuple


class Version(NamedTuple):
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(map(str, self.prerelease))
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def parse(text: str) -> Version:
    raise NotImplementedError


def compare(a: str, b: str) -> int:
    raise NotImplementedError


def satisfies(version: str, range: str) -> bool:
    raise NotImplementedError
