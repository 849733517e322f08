"""Baseline: numeric versions and plain comparators only (a quick first attempt).

Pre-releases compare as strings, builds are ignored, leading zeros are accepted, and
ranges know only <, <=, >, >=, = with full versions, spaces and ||.
"""

import re


class Version:
    def __init__(self, text):
        m = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$", text)
        if not m:
            raise ValueError(text)
        self.major, self.minor, self.patch = int(m[1]), int(m[2]), int(m[3])
        self.prerelease = tuple(m[4].split(".")) if m[4] else ()
        self.build = tuple(m[5].split(".")) if m[5] else ()
        self.text = text

    def __str__(self):
        return self.text

    def key(self):
        return (self.major, self.minor, self.patch, not self.prerelease, self.prerelease)


def parse(text):
    return Version(text)


def compare(a, b):
    ka, kb = parse(a).key(), parse(b).key()
    return (ka > kb) - (ka < kb)


def satisfies(version, range):
    for part in range.split("||"):
        ok = True
        for comp in part.split():
            m = re.match(r"^(<=|>=|<|>|=)?(.*)$", comp)
            c = compare(version, m[2])
            op = m[1] or "="
            ok = ok and {"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0, "=": c == 0}[op]
        if ok:
            return True
    return False
