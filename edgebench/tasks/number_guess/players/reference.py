#!/usr/bin/env python3
"""Reference player: binary search in every round (at most 10 guesses for 1..1000)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import main  # noqa: E402


def play(new, step):
    hello = new()
    reply = hello
    while not reply.get("done"):
        lo, hi = hello["low"], hello["high"]
        while True:
            guess = (lo + hi) // 2
            reply = step({"guess": guess})
            if reply["answer"] == "higher":
                lo = guess + 1
            elif reply["answer"] == "lower":
                hi = guess - 1
            else:
                break
    return reply


if __name__ == "__main__":
    main(play)
