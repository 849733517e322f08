"""Eval result files: judge text made safe once when written, listings capped with a note,
replaced results and unreadable ones kept in history/ (the unreadable ones graded again)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from sforge.grading import results
from sforge.grading.results import EvalResult, Rejected, load_result


def make(**fields: object) -> EvalResult:
    base = {"task": "t", "submission": "s" * 64, "key": "k" * 20, "valid": True,
            "score": 1.0, "summary": "ok"}
    return EvalResult(**{**base, **fields})  # type: ignore[arg-type]


def stored(path: Path) -> dict:
    raw = path.read_bytes()
    raw.decode("utf-8")  # strict: every byte is UTF-8
    return json.loads(raw)


def test_lone_surrogates_and_controls_become_replacement_chars(tmp_path: Path) -> None:
    """A grader echoing a non-UTF-8 file name (caf\\udce9) used to be stored as is; `report`
    then died with UnicodeEncodeError naming no file."""
    path = tmp_path / "r.json"
    make(summary="caf\udce9 \x1b[31mred\x1b[0m\ttab\nline",
         details=[{"file\udce9": "x\ud800"}], metrics={"m": "\x00"},
         rejected=[Rejected("caf\udce9", "why")]).write(path)
    data = stored(path)
    assert data["summary"] == "caf\ufffd \ufffd[31mred\ufffd[0m\ttab\nline"
    assert data["details"] == [{"file\ufffd": "x\ufffd"}]
    assert data["metrics"] == {"m": "\ufffd"}
    assert data["rejected"] == [{"path": "caf\ufffd", "reason": "why"}]
    assert load_result(path).summary.startswith("caf\ufffd")


def test_listings_capped_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    make(summary="s" * 100_000, details=["d" * 1000] * 1000,
         rejected=[Rejected("p" * 5000, "r")] * 3000,
         metrics={f"m{i}": "v" * 100 for i in range(2000)}).write(path)
    data = stored(path)
    assert len(path.read_bytes()) < 2 << 20
    assert data["summary"].endswith(f"[sforge: {100_000 - results.MAX_SUMMARY_CHARS} more "
                                    "characters cut]")
    assert data["details"][-1].startswith("[sforge: ") and "of 1000 entries cut" in \
        data["details"][-1]
    assert len(data["rejected"]) == results.MAX_REJECTED + 1
    assert data["rejected"][-1]["reason"] == "2000 more rejected members not listed"
    assert len(data["rejected"][0]["path"]) < 1100
    assert "entries cut" in data["metrics"]["sforge_cut"]


def test_deep_nesting_and_non_finite_numbers_are_stored_as_json(tmp_path: Path) -> None:
    """A grader's details nested 600 deep stopped the result from being written (a recursion
    error: no result, the tables stuck); NaN and Infinity were stored and printed as bare
    NaN/Infinity, which is not JSON. Deep parts are cut with a note, non-finite numbers null."""
    deep: object = "bottom"
    for _ in range(600):
        deep = {"d": [deep]}
    path = tmp_path / "r.json"
    make(details=[deep], metrics={"nan": float("nan"), "inf": [float("inf"), 1.5],
                                  "deep": deep}).write(path)
    text = path.read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} stored"))
    assert data["metrics"]["nan"] is None and data["metrics"]["inf"] == [None, 1.5]
    assert "nested deeper than" in text and "bottom" not in text
    level, depth = data["details"], 0
    while not isinstance(level, str):
        level, depth = (level["d"] if isinstance(level, dict) else level[0]), depth + 1
    assert depth <= results.MAX_DEPTH and "nested deeper than" in level
    assert load_result(path).valid


def test_replaced_result_goes_to_history(tmp_path: Path) -> None:
    path = tmp_path / "evals" / "t" / "k.json"
    make(score=1.0).write(path)
    make(score=2.0).write(path)
    assert stored(path)["score"] == 2.0
    [old] = (path.parent / "history").iterdir()
    assert old.name.startswith("k.") and old.name.endswith(".superseded.json")
    assert stored(old)["score"] == 1.0


@pytest.mark.parametrize("damage", [b'{"task": "t", "valid": tr', b"", b"[1, 2]",
                                    b'{"valid": "yes"}'])
def test_unreadable_result_set_aside_with_a_warning(tmp_path: Path, damage: bytes,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "evals" / "t" / "k.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(damage)
    with caplog.at_level(logging.WARNING):
        assert load_result(path) is None
    assert not path.exists()
    [aside] = (path.parent / "history").iterdir()
    assert aside.read_bytes() == damage and aside.name.endswith(".unreadable.json")
    assert str(path) in caplog.text and "graded again" in caplog.text


def test_missing_result_is_none(tmp_path: Path) -> None:
    assert load_result(tmp_path / "nope.json") is None


def test_eval_keyer_makes_eval_keys_byte_for_byte():
    """The per-task key maker composes the very JSON eval_key always hashed; limits that
    differ from the defaults join it as "limits", none leave it as it was."""
    import hashlib
    import json

    from sforge.grading.results import GRADING_CONTRACT, eval_key, eval_keyer

    settings = {"cmd": 'sh "run"', "paths": ["."], "timeout_sec": 60, "cwd": "/wörk"}
    for limits in ({}, {"judge_limits": {"writable": None, "pids": 64}}):
        for tag, sha in [("b.judge.t:0123456789ab", "f" * 64), ("x", 'quote"d')]:
            whole = json.dumps({"contract": GRADING_CONTRACT, "judge": tag, "submission": sha,
                                "settings": settings, **({"limits": limits} if limits else {})},
                               sort_keys=True)
            assert eval_keyer(tag, settings, limits=limits)(sha) == \
                eval_key(tag, sha, settings, limits=limits) == \
                hashlib.sha256(whole.encode()).hexdigest()[:20]


def test_regrading_puts_back_only_what_no_new_verdict_replaced(tmp_path: Path) -> None:
    """A result graded again on purpose stays the current one (with its log) unless a new
    verdict replaced it; a new one is never overwritten, the old then stays in history/."""
    kept, replaced = tmp_path / "evals" / "t" / "a.json", tmp_path / "evals" / "t" / "b.json"
    for path in (kept, replaced):
        make(score=1.0).write(path)
        path.with_suffix(".log").write_text("old log\n")
    with pytest.raises(RuntimeError), results.regrading([kept, replaced]) as count:
        assert count == 2 and not kept.exists() and not replaced.exists()
        kept.with_suffix(".log").write_text("failed attempt\n")
        make(score=2.0).write(replaced)
        raise RuntimeError("the daemon went away")
    assert stored(kept)["score"] == 1.0 and kept.with_suffix(".log").read_text() == "old log\n"
    assert stored(replaced)["score"] == 2.0
    history = kept.parent / "history"
    assert sorted(p.name.split(".")[0] + p.suffix for p in history.iterdir()) == \
        ["a.log", "b.json", "b.log"]
    assert "failed attempt" in next(history.glob("a.*.failed.log")).read_text()
