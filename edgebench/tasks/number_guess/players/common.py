"""Shared by the scripted players: play through `sforge-game` in the work container.

A player is a function play(new, step) -> final reply: `new()` starts a session and
returns the game's opening message, `step(request)` returns the game's reply. Run as a
script, a player plays one session through the `sforge-game` command (what
`sforge run --agent script` runs); tests pass the service client's methods instead.
"""

import json
import subprocess


def sforge_game(*args):
    out = subprocess.run(["sforge-game", *args], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def main(play):
    final = play(lambda: sforge_game("new")["hello"],
                 lambda request: sforge_game("step", json.dumps(request)))
    print(json.dumps(final))
