"""Reference: semantic versions and ranges exactly as README.md specifies."""

from __future__ import annotations

import re
from functools import total_ordering

_NUM = r"(?:0|[1-9]\d*)"
_PRE_ID = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
_FULL = re.compile(
    rf"^({_NUM})\.({_NUM})\.({_NUM})(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    rf"(?:\+({_BUILD_ID}(?:\.{_BUILD_ID})*))?$"
)
_WILD = {"x", "X", "*"}


@total_ordering
class Version:
    __slots__ = ("major", "minor", "patch", "prerelease", "build", "_text")

    def __init__(self, major, minor, patch, prerelease=(), build=(), text=None):
        self.major, self.minor, self.patch = major, minor, patch
        self.prerelease, self.build = tuple(prerelease), tuple(build)
        self._text = text

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(map(str, self.prerelease))
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Version({str(self)!r})"

    def _key(self):
        # A release sorts after all of its pre-releases; numeric identifiers before others.
        pre = tuple((0, i, "") if isinstance(i, int) else (1, 0, i) for i in self.prerelease)
        return (self.major, self.minor, self.patch, not self.prerelease, pre)

    def __eq__(self, other):
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other):
        return self._key() < other._key()

    def __hash__(self):
        return hash(self._key())


def parse(text: str) -> Version:
    m = _FULL.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not a semantic version: {text!r}")
    pre = tuple(int(i) if i.isdigit() else i for i in m.group(4).split(".")) if m.group(4) else ()
    build = tuple(m.group(5).split(".")) if m.group(5) else ()
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, build, text)


def compare(a: str, b: str) -> int:
    va, vb = parse(a), parse(b)
    return (va > vb) - (va < vb)


def _floor(nums: list[int]) -> Version:
    """The lowest version starting with `nums`: zero-padded, pre-release -0."""
    padded = nums + [0] * (3 - len(nums))
    return Version(*padded, prerelease=(0,))


def _next(nums: list[int]) -> Version:
    return _floor(nums[:-1] + [nums[-1] + 1])


def _partial(text: str) -> tuple[Version | None, list[int] | None]:
    """(full version, None) or (None, given numbers); [] means '*'."""
    if text in _WILD:
        return None, []
    if _FULL.match(text):
        return parse(text), None
    parts = text.split(".")
    if len(parts) > 3:
        raise ValueError(f"bad version in range: {text!r}")
    nums: list[int] = []
    for i, part in enumerate(parts):
        if part in _WILD:
            if any(p not in _WILD for p in parts[i:]):
                raise ValueError(f"bad version in range: {text!r}")
            break
        if not re.fullmatch(_NUM, part):
            raise ValueError(f"bad version in range: {text!r}")
        nums.append(int(part))
    if len(nums) == 3:
        raise ValueError(f"bad version in range: {text!r}")
    return None, nums


def _comparator(text: str):
    m = re.fullmatch(r"(<=|>=|<|>|=|\^|~)?(.+)", text)
    if not m:
        raise ValueError(f"bad comparator: {text!r}")
    op, full, nums = m.group(1) or "=", *_partial(m.group(2))
    if full is None and not nums:
        return lambda v: True
    if full is not None:
        lo = hi = full
        given = [full.major, full.minor, full.patch]
    else:
        lo, hi, given = _floor(nums), _next(nums), nums
    if op == "=":
        return (lambda v: v == full) if full is not None else (lambda v: lo <= v < hi)
    if op == ">":
        return (lambda v: v > full) if full is not None else (lambda v: v >= hi)
    if op == ">=":
        return lambda v: v >= lo
    if op == "<":
        return lambda v: v < lo
    if op == "<=":
        return (lambda v: v <= full) if full is not None else (lambda v: v < hi)
    if op == "^":
        first = next((i for i, n in enumerate(given) if n != 0), len(given) - 1)
        upper = _next(given[: first + 1])
        return lambda v: lo <= v < upper
    # "~"
    upper = _next(given[:2]) if len(given) >= 2 else _next(given[:1])
    return lambda v: lo <= v < upper


def _set(text: str):
    text = text.strip()
    if text in ("", "*"):
        return [lambda v: True]
    m = re.fullmatch(r"(\S+) - (\S+)", text)
    if m:
        return [_comparator(">=" + m.group(1)), _comparator("<=" + m.group(2))]
    return [_comparator(t) for t in text.split()]


def satisfies(version: str, range: str) -> bool:
    v = parse(version)
    sets = [_set(part) for part in range.split("||")]
    return any(all(c(v) for c in comparators) for comparators in sets)
