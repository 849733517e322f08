#!/bin/sh
# number_guess reference player: binary search in every round (at most 10 guesses for
# 1..1000). A scripted agent: `sforge run --task number_guess --agent script --script
# players/reference.sh` runs it in the work container, where it plays one session
# through `sforge-game` and prints the game's last reply.
exec /usr/bin/python3 - <<'PY'
import json
import subprocess


def game(*args):
    out = subprocess.run(["sforge-game", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


hello = game("new")["hello"]
reply = hello
while not reply.get("done"):
    lo, hi = hello["low"], hello["high"]
    while True:
        guess = (lo + hi) // 2
        reply = game("step", json.dumps({"guess": guess}))
        if reply["answer"] == "higher":
            lo = guess + 1
        elif reply["answer"] == "lower":
            hi = guess - 1
        else:
            break
print(json.dumps(reply))
PY
