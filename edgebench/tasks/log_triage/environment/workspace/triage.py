"""Read an access log on stdin, print a JSON object of facts about it (see README.md)."""

import json
import sys


def main() -> None:
    lines = sys.stdin.read().split("\n")
    facts = {
        "requests": None,
        "malformed": None,
        "status_5xx": None,
        "unique_clients": None,
        "bytes_total": None,
        "top_paths": [],
        "p95_ms": None,
        "slowest_path": None,
        "busiest_5xx_minute": None,
    }
    del lines  # TODO: compute the facts
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
