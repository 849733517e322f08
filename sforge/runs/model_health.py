"""Whether a run's model API answers at all: a run whose model calls all fail (no key, a
wrong key, a wrong --model-api, an API that is down) is broken, and says so early instead of
burning its whole timeout.

A call fails when the API answers HTTP 400 or more, or cannot be reached, or cuts its reply.
The run fails (state `failed`, the last failure's status and message as its error) when
`fail_after` calls in a row have failed and none has ever succeeded, or when it ends with
calls made and none succeeded. Rate limits (429, 529, or any reply with Retry-After) are
a reason to wait, not a verdict: they never count toward `fail_after` (many runs sharing one
key are throttled at first), but a run ending with only such replies has still failed. Once
one call has succeeded the API is known to work: later errors are the agent's to retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_FAIL_AFTER = 5  # config.yaml run_model_failures
MESSAGE_CHARS = 300


def _is_rate_limit(status: int, headers: Mapping[str, str]) -> bool:
    return status in (429, 529) or any(k.lower() == "retry-after" for k in headers)


def upstream_message(body: Any) -> str:
    """The API's own words from an error reply: Anthropic's {"error": {"type", "message"}},
    OpenAI's {"error": {"message", "code"}}, a plain {"error": "..."} or text."""
    if isinstance(body, list):  # an event stream: its error event
        body = next((e for e in body if isinstance(e, dict) and "error" in e), None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            kind = err.get("type") or err.get("code")
            text = err.get("message") or err.get("detail") or ""
            msg = f"{kind}: {text}" if kind and text else str(text or kind or err)
        else:
            msg = str(err)
    else:
        msg = str(body or "").strip()
    msg = " ".join(msg.split())
    return msg[:MESSAGE_CHARS] + ("…" if len(msg) > MESSAGE_CHARS else "")


@dataclass
class ModelHealth:
    """A run's model calls so far: whether the API answers at all, and its last error."""
    upstream: str
    fail_after: int = DEFAULT_FAIL_AFTER  # 0: only the verdict at the end
    succeeded: int = 0
    failed: int = 0
    streak: int = 0            # failures in a row that count toward fail_after
    last: str | None = None    # the last failure: "HTTP 401 authentication_error: ..."
    reported: bool = False

    def record(self, status: int, body: Any, headers: Mapping[str, str],
               error: str | None) -> str | None:
        """Count one call; → the reason to stop the run, once, when fail_after is reached."""
        if status < 400 and error is None:
            self.succeeded += 1
            self.streak = 0
            return None
        self.failed += 1
        words = upstream_message(body) if status >= 400 else ""
        self.last = f"HTTP {status}" + (f" {words}" if words else "") \
            + (f" ({error})" if error and error not in words else "")
        if not _is_rate_limit(status, headers):
            self.streak += 1
        if self.succeeded or self.reported or not self.fail_after \
                or self.streak < self.fail_after:
            return None
        self.reported = True
        return self.reason(f"{self.streak} model calls in a row failed")

    def verdict(self) -> str | None:
        """At the end of a run: the reason it failed, if its calls all failed."""
        if self.succeeded or not self.failed:
            return None
        return self.reason(f"all {self.failed} model call(s) failed")

    def reason(self, what: str) -> str:
        """A failure message naming the API, what failed and its last error."""
        return f"model API {self.upstream}: {what}, none succeeded; last: {self.last}"

    def as_dict(self) -> dict[str, Any]:
        """The counts and the last error as stored in the run's record."""
        return {"succeeded": self.succeeded, "failed": self.failed, "last_error": self.last}
