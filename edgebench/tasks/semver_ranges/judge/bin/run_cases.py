#!/usr/bin/python3
"""Call the submitted semver.py on each case's inputs and print what it answered.

Started by the grader as `nobody` in the submission's directory. Standard input: a JSON
list of {"id": int, "call": "parse" | "compare" | "satisfies", "args": [str, ...]}, the
inputs only. Standard output: one JSON object per line, first {"imported": true} or
{"import_error": "Type: message"}, then {"id": ..., ...answer} per case in input order:

  parse(text)            {"returned": {"fields": [major, minor, patch, [prerelease...],
                          [build...]], "str": str(version)}}, or {"inspect_error": ...}
                          when reading those off the returned object raised
  compare(a, b)          {"returned": [compare(a, b), compare(b, a)]}, only the results
                          of the calls made before one raised ([] or [compare(a, b)])
  satisfies(version, r)  {"returned": satisfies(version, r)}

plus "raised": {"value_error": bool, "error": "Type: message"} when the call raised.
Values are sent as plain JSON: bool, int, float, str, None and lists as themselves,
anything else as {"object": type name, "repr": ...}. The submission's own writes to
stdout go to stderr. The grader trusts none of this beyond "these are the answers".
"""

import json
import os
import sys

MAX_DEPTH = 8
MAX_ITEMS = 64
MAX_STR = 1000


def short(exc: BaseException) -> str:
    """`Type: first line of the message` of an exception, at most 200 characters."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # noqa: BLE001  (a str() that raises)
        lines = []
    return (f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)[:200]


def plain(value: object, depth: int = 0) -> object:
    """`value` as plain JSON: bool, int, float, str, None, lists; anything else described."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str) and len(value) <= MAX_STR:
        return str.__str__(value)
    if isinstance(value, list | tuple) and len(value) <= MAX_ITEMS and depth < MAX_DEPTH:
        return [plain(item, depth + 1) for item in value]
    try:
        text = repr(value)[:200]
    except Exception:  # noqa: BLE001
        text = "?"
    return {"object": type(value).__name__, "repr": text}


def answer(sv, call: str, args: list) -> dict:
    """What the submission's `call` on `args` returned or raised, as the module doc says."""
    got: list = []
    try:
        if call == "parse":
            version = sv.parse(*args)
            try:
                fields = [version.major, version.minor, version.patch,
                          tuple(version.prerelease), tuple(version.build)]
                return {"returned": {"fields": plain(fields), "str": plain(str(version))}}
            except BaseException as exc:  # noqa: BLE001
                return {"inspect_error": short(exc)}
        if call == "compare":
            got.append(plain(sv.compare(args[0], args[1])))
            got.append(plain(sv.compare(args[1], args[0])))
            return {"returned": got}
        return {"returned": plain(sv.satisfies(*args))}
    except BaseException as exc:  # noqa: BLE001  (SystemExit included: a failed case)
        out: dict = {"raised": {"value_error": isinstance(exc, ValueError), "error": short(exc)}}
        if call == "compare":
            out["returned"] = got
        return out


def main() -> None:
    """Read the cases from stdin, import semver and send one answer per case."""
    cases = json.loads(sys.stdin.buffer.read())
    sys.stdout.flush()
    report = os.dup(1)  # the answers' channel; fd 1 becomes stderr for the submission
    os.dup2(2, 1)

    def send(obj: dict) -> None:
        os.write(report, (json.dumps(obj) + "\n").encode())

    try:
        import semver as sv
    except BaseException as exc:  # noqa: BLE001
        send({"import_error": short(exc)})
        return
    send({"imported": True})
    for case in cases:
        send({"id": case["id"], **answer(sv, case["call"], case["args"])})


if __name__ == "__main__":
    main()
