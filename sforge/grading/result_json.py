"""What a grader's result.json says: a verdict with its fields, or why it is unusable."""

from __future__ import annotations

import json
import math
from typing import Any


def parse_result(raw: bytes) -> tuple[str | None, dict[str, Any]]:
    """The bytes of a grader's result.json → (why it is unusable or None, EvalResult fields).

    `valid: false` is no problem: it is the grader's verdict, kept with its summary. Fields
    hold what could be read (summary, details, metrics, valid, score) even when there is a
    problem, so feedback survives.
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"result.json is not valid JSON: {exc}", {}
    if not isinstance(data, dict):
        return f"result.json is not a JSON object (got {type(data).__name__})", {}
    fields: dict[str, Any] = {
        "summary": "" if data.get("summary") is None else str(data["summary"]),
        "details": data.get("details", []),
        "metrics": data.get("metrics", {}),
    }
    valid = data.get("valid")
    if "valid" not in data:
        return "result.json has no 'valid' field", fields
    if not isinstance(valid, bool):
        return f"result.json: 'valid' must be true or false, got {valid!r}", fields
    given = data.get("score")
    number = isinstance(given, int | float) and not isinstance(given, bool)
    score: Any = given
    if isinstance(given, int | float) and number:
        try:
            score = float(given)
        except OverflowError:
            score = math.inf
    finite = number and math.isfinite(score)
    fields["valid"] = valid
    fields["score"] = score if finite else None
    if not valid:
        return None, fields
    if "score" not in data:
        return "result.json: valid is true but there is no 'score'", fields
    if not number:
        return f"result.json: score must be a number, got {data['score']!r}", fields
    if not finite:
        return f"result.json: score must be finite, got {data['score']!r}", fields
    return None, fields
