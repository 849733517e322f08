#!/bin/sh
# number_guess baseline player: a lopsided search that always guesses a sixth of the way
# into the range still open, so it often runs out of guesses before it finds the secret.
# Run like players/reference.sh; prints the game's last reply.
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
        guess = lo + (hi - lo) // 6
        reply = game("step", json.dumps({"guess": guess}))
        if reply["answer"] == "higher":
            lo = guess + 1
        elif reply["answer"] == "lower":
            hi = guess - 1
        else:
            break
print(json.dumps(reply))
PY
