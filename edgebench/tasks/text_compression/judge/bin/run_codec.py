#!/usr/bin/python3
"""Run one direction of the submitted codec: stdin → codec.compress/decompress → stdout.

Started by the grader as `nobody` in the submission's directory, one process per file and
direction, so that decompress() never sees the original bytes. Standard output carries the
returned bytes and nothing else: the codec's own writes to stdout (print(), fd 1) go to
stderr, since fd 1 points there before the codec is imported.
"""

import os
import sys


def main() -> None:
    """Read stdin, call the codec's `argv[1]` direction on it, write the returned bytes."""
    direction = sys.argv[1]
    data = sys.stdin.buffer.read()
    sys.stdout.flush()
    report = os.fdopen(os.dup(1), "wb")  # the returned bytes' channel
    os.dup2(2, 1)  # fd 1, and so sys.stdout, is stderr for the codec
    sys.path.insert(0, os.getcwd())
    import codec  # the submission, from cwd

    out = codec.compress(data) if direction == "compress" else codec.decompress(data)
    if not isinstance(out, bytes | bytearray):
        sys.exit(f"{direction}() returned {type(out).__name__}, expected bytes")
    report.write(out)
    report.flush()


if __name__ == "__main__":
    main()
