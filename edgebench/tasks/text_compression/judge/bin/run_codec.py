#!/usr/bin/python3
"""Run one direction of the submitted codec: stdin → codec.compress/decompress → stdout.

Started by the grader as `nobody` in the submission's directory, one process per file and
direction, so that decompress() never sees the original bytes.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import codec  # noqa: E402  (the submission, from cwd)

direction = sys.argv[1]
data = sys.stdin.buffer.read()
out = codec.compress(data) if direction == "compress" else codec.decompress(data)
if not isinstance(out, bytes | bytearray):
    sys.exit(f"{direction}() returned {type(out).__name__}, expected bytes")
sys.stdout.buffer.write(out)
