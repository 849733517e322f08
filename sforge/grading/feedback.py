"""What a judge said beyond its score: per-test `details` and `metrics` of an eval result.

Graders write these free-form (the judge contract only suggests `name`, `status`, `score`
per detail), so they are normalised here, once, for both the report's per-task pages and
`load_results().details`: every detail becomes (test, status, score, message), whatever
shape the grader gave it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from sforge.core.fileio import loads_json, read_bytes

DETAIL_COLUMNS = ("test", "status", "score", "message")
_DETAIL_KEYS = {"name", "test", "status", "score", "message", "msg", "error"}
_PLAIN_KEYS = {"name", "status", "score"}
MAX_TEXT = 2000  # a message longer than this is cut (a grader may dump a whole traceback)


class Detail(NamedTuple):  # a tuple: a report makes 500,000 of them (a dataclass cost 3×)
    """One per-test detail of a grader: test name, status, score and message."""
    test: str
    status: str
    score: float | None
    message: str


@dataclass
class Feedback:
    """The parts of one eval result a person reads to debug a submission."""

    details: list[Detail] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    reason: str = ""
    rejected: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None  # the result file could not be read

    @classmethod
    def from_compact(cls, data: Any, summary: Any = None, reason: Any = None) -> Feedback | None:
        """Feedback from compact_feedback's lists, which the result cache keeps so a report
        page does not parse its 500 result files again (None when `data` is not of that
        shape: a damaged cache)."""
        try:
            details, metrics, rejected = data
            made = cls(list(map(Detail._make, details)), dict(metrics), _text(summary),
                       _text(reason), [{"path": p, "reason": r} for p, r in rejected])
        except (TypeError, ValueError):
            return None
        if type(details) is not list or not all(_compact_detail(d) for d in made.details):
            return None
        return made


def _compact_detail(d: Detail) -> bool:
    """Whether a detail read back from the cache is of the shape _detail_tuples makes."""
    return type(d.test) is str and type(d.status) is str and type(d.message) is str and (
        d.score is None or type(d.score) is float or type(d.score) is int)


def json_text(value: Any) -> str:
    """A grader's value as text: a string as it is, anything else as its JSON."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _text(value: Any) -> str:
    if value is None:
        return ""
    text = json_text(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def normalise_details(raw: Any) -> list[Detail]:
    """A grader's `details` as Detail rows. An item that is not an object is kept as its
    message; a missing name becomes the item's position, so nothing a grader said is lost."""
    return list(map(Detail._make, _detail_tuples(raw)))


def _detail_tuples(raw: Any) -> list[tuple[str, str, float | None, str]]:
    """normalise_details as plain tuples (the result cache stores them as they are)."""
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return [] if raw is None else [("0", "", None, _text(raw))]
    items: list[Any] = []
    for item in raw:  # {"test_a": "PASSED", "test_b": {...}}: one entry per test name
        if type(item) is dict and item.keys() <= _PLAIN_KEYS:  # the usual shape
            items.append(item)
        elif isinstance(item, dict) and item and not set(item) & _DETAIL_KEYS:
            items += [v if isinstance(v, dict) and "name" in v else
                      ({"name": k, **v} if isinstance(v, dict) else {"name": k, "status": v})
                      for k, v in item.items()]
        else:
            items.append(item)
    out: list[tuple[str, str, float | None, str]] = []
    for i, item in enumerate(items):
        if type(item) is dict and item.keys() <= _PLAIN_KEYS:  # the usual shape, made directly
            name, status, score = item.get("name", i), item.get("status"), item.get("score")
            if type(name) is str and len(name) <= MAX_TEXT and (
                    status is None or type(status) is str and len(status) <= MAX_TEXT):
                out.append((name, status or "", score if type(score) is float
                            and math.isfinite(score) else _number(score), ""))
                continue
        if not isinstance(item, dict):
            out.append((str(i), "", None, _text(item)))
            continue
        name = item.get("name", item.get("test", i))
        message = item.get("message", item.get("msg", item.get("error")))
        out.append((_text(name), _text(item.get("status")), _number(item.get("score")),
                    _text(message)))
    return out


def normalise_metrics(raw: Any) -> dict[str, Any]:
    """Metric name → a number, or the value as text when it is not one."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): (_number(v) if _number(v) is not None else _text(v))
            for k, v in raw.items()}


def read_feedback(path: Path | str) -> Feedback:
    """Feedback of the eval result at `path`; an unreadable file says so in `error`."""
    try:
        data = loads_json(read_bytes(path), bulk=True)  # NaN/Infinity: json's reading
    except FileNotFoundError:
        return Feedback(error="result file missing")
    except (OSError, ValueError, RecursionError) as exc:
        return Feedback(error=f"unreadable result file: {exc}")
    if not isinstance(data, dict):
        return Feedback(error="not an eval result")
    return feedback_of(data)


def feedback_of(data: dict[str, Any]) -> Feedback:
    """Feedback of a parsed eval result."""
    feedback = Feedback.from_compact(compact_feedback(data), data.get("summary"),
                                     data.get("reason"))
    assert feedback is not None  # compact_feedback's own shape
    return feedback


def compact_feedback(data: dict[str, Any]) -> list[Any]:
    """details, metrics and rejected members of a parsed eval result as plain JSON lists
    (Feedback.from_compact reads them back)."""
    rejected = [[_text(r.get("path")), _text(r.get("reason"))]
                for r in data.get("rejected") or [] if isinstance(r, dict)]
    return [_detail_tuples(data.get("details")), normalise_metrics(data.get("metrics")),
            rejected]
