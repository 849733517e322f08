"""Run triage.py on sample/access.log and compare with sample/expected.json, key by key."""

import json
import subprocess
import sys

with open("sample/access.log", "rb") as log:
    out = subprocess.run([sys.executable, "triage.py"], stdin=log, capture_output=True,
                         timeout=20)
if out.returncode:
    sys.exit(f"triage.py failed:\n{out.stderr.decode()}")
got = json.loads(out.stdout)
with open("sample/expected.json") as fh:
    want = json.load(fh)
right = 0
for key, value in want.items():
    ok = got.get(key) == value
    right += ok
    print(f"{'ok  ' if ok else 'DIFF'} {key}: {got.get(key)!r}" + ("" if ok else f" != {value!r}"))
print(f"{right}/{len(want)} right")
