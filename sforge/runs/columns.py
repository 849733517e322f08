"""What `sforge runs` shows of a run record beyond its state: model tokens, cost and why a
broken run failed."""

from __future__ import annotations

from typing import Any

ERROR_CHARS = 160  # the table's error column; --json keeps the whole message


def record_state(record: dict[str, Any], default: str) -> str:
    """A record's own state (done, failed, interrupted), else what its file implies (older
    records have none)."""
    return record.get("state") or default


def usage_columns(record: dict[str, Any]) -> dict[str, Any]:
    """tokens_in (input, cache writes and reads alike), tokens_out, cost_usd (None when the
    model has no price in its agent.toml, or the agent no model)."""
    usage = record.get("usage") or {}
    inputs = [usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens",
                                      "cache_read_input_tokens")]
    return {
        "tokens_in": sum(v for v in inputs if isinstance(v, int)) if usage else None,
        "tokens_out": usage.get("output_tokens"),
        "cost_usd": usage.get("cost_usd"),
    }


def shorten_error(row: dict[str, Any]) -> dict[str, Any]:
    """The row for the table: a long error cut to ERROR_CHARS."""
    error = row.get("error")
    if isinstance(error, str) and len(error) > ERROR_CHARS:
        return {**row, "error": error[:ERROR_CHARS - 1] + "…"}
    return row
