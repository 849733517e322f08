#!/usr/bin/env python3
"""number_guess: the game server (`game.py serve`) and its re-scorer (`game.py replay FILE`).

serve: sforge starts it in a fresh container per session and speaks line-delimited JSON
over its stdio. It prints the opening line, then answers each request line with one reply
line, keeping /opt/sforge/result.json current (the score so far); the reply that ends the
game carries "done": true and is printed after the final result.json is in place.

replay: re-scores a session transcript (session.jsonl, as sforge records it: the opening
line with the session index, then one line per step) by playing its requests again.

Deterministic: the secrets of a session follow from SFORGE_SESSION_INDEX (1, 2, ... within
a run) and a seed kept in this root-only file.
"""

import json
import os
import random
import sys

ROUNDS = 5
LOW, HIGH = 1, 1000
MAX_GUESSES = 12
SEED = "number_guess-1:7c41e0"
RESULT = "/opt/sforge/result.json"


class Game:
    def __init__(self, index):
        rng = random.Random(f"{SEED}:{index}")
        self.secrets = [rng.randint(LOW, HIGH) for _ in range(ROUNDS)]
        self.round = 0          # 0-based current round
        self.guesses = 0        # in the current round
        self.points = []        # per finished round
        self.total_guesses = 0

    @property
    def done(self):
        return self.round >= ROUNDS

    @property
    def score(self):
        return sum(self.points)

    def hello(self):
        return {"game": "number_guess", "rounds": ROUNDS, "low": LOW, "high": HIGH,
                "max_guesses": MAX_GUESSES, "round": 1, "score": 0, "done": False}

    def play(self, request):
        if self.done:
            return {"error": "the game is over", "score": self.score, "done": True}
        guess = request.get("guess") if isinstance(request, dict) else None
        if not isinstance(guess, int) or isinstance(guess, bool) or not LOW <= guess <= HIGH:
            return {"error": f"expected {{\"guess\": <integer {LOW}..{HIGH}>}}",
                    "round": self.round + 1, "score": self.score, "done": False}
        self.guesses += 1
        self.total_guesses += 1
        secret = self.secrets[self.round]
        reply = {"round": self.round + 1, "guess": guess, "guesses": self.guesses}
        if guess == secret:
            reply["answer"] = "correct"
        elif self.guesses >= MAX_GUESSES:
            reply["answer"] = "out of guesses"
            reply["secret"] = secret
        else:
            reply["answer"] = "higher" if secret > guess else "lower"
        if reply["answer"] in ("correct", "out of guesses"):
            points = MAX_GUESSES + 1 - self.guesses if guess == secret else 0
            self.points.append(points)
            reply["points"] = points
            self.round += 1
            self.guesses = 0
        reply["score"] = self.score
        reply["done"] = self.done
        return reply

    def result(self):
        details = [{"name": f"round_{i + 1}", "status": "PASSED" if p else "FAILED",
                    "score": p} for i, p in enumerate(self.points)]
        state = "game over" if self.done else f"round {self.round + 1} of {ROUNDS}"
        return {"valid": True, "score": float(self.score),
                "summary": f"{state}: {self.score} points in {len(self.points)} round(s)",
                "details": details, "metrics": {"guesses": self.total_guesses,
                                                "rounds_played": len(self.points)}}


def write_result(data):
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    tmp = RESULT + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, RESULT)  # never half-written


def serve():
    game = Game(int(os.environ.get("SFORGE_SESSION_INDEX", "1")))
    write_result(game.result())
    print(json.dumps(game.hello()), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        reply = game.play(request)
        write_result(game.result())  # before the reply: the score it reports is on disk
        print(json.dumps(reply), flush=True)
    return 0


def replay(path):
    try:
        with open(path) as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
        index = int(lines[0]["index"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        write_result({"valid": False, "summary": f"not a session transcript: {exc}"})
        return 0
    game = Game(index)
    for step in lines[1:]:
        game.play(step.get("request") if isinstance(step, dict) else None)
    result = game.result()
    if not game.done:
        result.update(valid=False, summary="the transcript ends before the game is over; "
                                           + result["summary"])
    write_result(result)
    print(result["summary"])
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(serve())
    if sys.argv[1:2] == ["replay"] and len(sys.argv) == 3:
        sys.exit(replay(sys.argv[2]))
    print("usage: game.py serve | game.py replay SESSION.jsonl", file=sys.stderr)
    sys.exit(2)
