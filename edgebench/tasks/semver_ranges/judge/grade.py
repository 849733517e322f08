#!/usr/bin/python3
"""Grader for `semver_ranges`: check the submitted semver.py on the hidden cases.

score = passed / total (0.0–1.0); details list every case as PASSED or FAILED, named as
pytest names a parametrized test (test_parse_valid[1.2.3-fields1], ...). A missing or
broken semver.py fails every case: a valid score of 0.

Trust: the expected outcomes (cases.py) never leave this root process. The submission
runs as `nobody` in bin/run_cases.py, which gets each case's inputs on stdin and prints
the submission's answers on a pipe only this process reads; this process decides every
PASSED/FAILED by comparing those plain JSON answers with the expectations. Nothing else a
`nobody` process does (files, exit code, output elsewhere) reaches the verdict, so the
submission can raise its score only by answering correctly.

Time: each case (and the import) gets CASE_TIMEOUT_S from the previous answer. A case that
runs out of time or kills its process fails, and the remaining cases run in a fresh
process; a submission that does not import fails every case. The whole suite gets
SUITE_TIMEOUT_S; cases not reached by then fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

JUDGE = Path(__file__).resolve().parent
RUNNER = str(JUDGE / "bin" / "run_cases.py")
RESULT = Path("/opt/sforge/result.json")
NOBODY = 65534
CASE_TIMEOUT_S = 10.0
SUITE_TIMEOUT_S = 240.0  # within task.toml's [judge] timeout_sec = 300
MAX_REPORT_BYTES = 1 << 20  # answers of one process; honest ones take a few kB
ANSWER_TIMEOUT = f"Timeout: no answer within {CASE_TIMEOUT_S:g} s"


def write_result(**result: object) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


# --- the cases: what run_cases.py calls, and how its answer is judged ----------------------

Verdict = Callable[[dict], str | None]  # answer → None when the case passes, else why not


@dataclass(frozen=True)
class Case:
    name: str
    call: str  # parse, compare or satisfies: see bin/run_cases.py
    args: tuple[str, ...]
    verdict: Verdict


def json_form(value: object) -> object:
    """An expectation as run_cases.py sends values: tuples as lists."""
    return [json_form(v) for v in value] if isinstance(value, tuple | list) else value


def raised(answer: dict) -> str | None:
    """The error a call raised, as run_cases.py describes it, or None if it raised none."""
    err = answer.get("raised")
    return str(err.get("error", "an exception"))[:200] if isinstance(err, dict) else None


def expect_value_error(answer: dict, first_call: bool = False) -> str | None:
    """pytest.raises(ValueError) around the call (with `first_call`: compare's first call)."""
    err = answer.get("raised")
    if not isinstance(err, dict) or (first_call and answer.get("returned") != []):
        return "Failed: DID NOT RAISE <class 'ValueError'>"
    if err.get("value_error") is not True:
        return raised(answer)  # any other exception fails the case with itself
    return None


def expect_parsed(text: str, fields: tuple) -> Verdict:
    def verdict(answer: dict) -> str | None:
        if (err := raised(answer)) is not None:
            return err
        if "inspect_error" in answer:
            return str(answer["inspect_error"])[:200]
        got = answer.get("returned")
        if not isinstance(got, dict):
            return "malformed answer"
        if got.get("fields") != json_form(fields):
            return f"AssertionError: assert {got.get('fields')!r} == {json_form(fields)!r}"
        if got.get("str") != text:
            return f"AssertionError: assert {got.get('str')!r} == {text!r}"
        return None
    return verdict


def expect_order(want: int) -> Verdict:
    def verdict(answer: dict) -> str | None:
        got = answer.get("returned")
        if not isinstance(got, list):
            return "malformed answer"
        if got[:1] != [want]:  # compare(a, b) == want
            return (f"AssertionError: assert {got[0]!r} == {want!r}" if got
                    else raised(answer) or "malformed answer")
        if got[1:2] != [-want]:  # compare(b, a) == -want
            return (f"AssertionError: assert {got[1]!r} == {-want!r}" if len(got) > 1
                    else raised(answer) or "malformed answer")
        return None
    return verdict


def expect_bool(want: bool) -> Verdict:
    def verdict(answer: dict) -> str | None:
        if (err := raised(answer)) is not None:
            return err
        got = answer.get("returned")
        return None if got is want else f"AssertionError: assert {got!r} is {want!r}"
    return verdict


def pytest_id(*values: object, index: int) -> str:
    """pytest's id of one parametrization: strings and numbers as such, others by position."""
    return "-".join(f"fields{index}" if isinstance(v, tuple) else str(v) for v in values)


def all_cases() -> list[Case]:
    """The cases in cases.py, in its order, with their verdicts."""
    spec = spec_from_file_location("semver_cases", JUDGE / "cases.py")
    hidden = module_from_spec(spec)
    spec.loader.exec_module(hidden)
    out = []
    for i, (text, fields) in enumerate(hidden.PARSE_VALID):
        out.append(Case(f"test_parse_valid[{pytest_id(text, fields, index=i)}]", "parse",
                        (text,), expect_parsed(text, fields)))
    for text in hidden.PARSE_INVALID:
        out.append(Case(f"test_parse_invalid[{text}]", "parse", (text,), expect_value_error))
    for i, (a, b, want) in enumerate(hidden.COMPARE):
        out.append(Case(f"test_compare[{pytest_id(a, b, want, index=i)}]", "compare", (a, b),
                        expect_order(want)))
    out.append(Case("test_compare_invalid", "compare", hidden.COMPARE_INVALID,
                    lambda answer: expect_value_error(answer, first_call=True)))
    for i, (version, rng, want) in enumerate(hidden.SATISFIES):
        out.append(Case(f"test_satisfies[{pytest_id(version, rng, want, index=i)}]",
                        "satisfies", (version, rng), expect_bool(want)))
    for i, (version, rng) in enumerate(hidden.SATISFIES_INVALID):
        out.append(Case(f"test_satisfies_invalid[{pytest_id(version, rng, index=i)}]",
                        "satisfies", (version, rng), expect_value_error))
    return out


# --- running the submission ----------------------------------------------------------------

def nobody_pids() -> list[int]:
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(x for x in status.read_text().splitlines() if x.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if NOBODY in map(int, uid_line.split()[1:]):
            pids.append(int(status.parent.name))
    return pids


def stop(proc: subprocess.Popen) -> None:
    """Kill the runner, its process group and, as root, every process of `nobody`."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    if os.geteuid() == 0:
        for _ in range(50):
            pids = nobody_pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
    proc.wait()


@dataclass
class Batch:
    """What one runner process answered before it finished, died or ran out of time."""

    answers: dict[int, dict] = field(default_factory=dict)
    imported: bool | None = None  # None: it never said whether semver imported
    why: str = ""  # why it stopped before answering every case
    stderr: bytes = b""


def run_batch(todo: list[tuple[int, Case]], home: Path, suite_end: float) -> Batch:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONPATH": os.getcwd(), "PYTHONDONTWRITEBYTECODE": "1"}
    user: dict[str, object] = {}
    if os.geteuid() == 0:
        user = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    proc = subprocess.Popen(["/usr/bin/python3", RUNNER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, **user)
    batch = Batch()
    wanted = {ident for ident, _ in todo}
    try:  # a few kB: fits the pipe's buffer, so this never waits for the runner
        proc.stdin.write(json.dumps([{"id": ident, "call": case.call, "args": case.args}
                                     for ident, case in todo]).encode())
    except BrokenPipeError:
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    buf, received = b"", 0
    answer_by = time.monotonic() + CASE_TIMEOUT_S
    try:
        while len(batch.answers) < len(wanted) and batch.imported is not False:
            left = min(answer_by, suite_end) - time.monotonic()
            if left <= 0:
                batch.why = (ANSWER_TIMEOUT if answer_by <= suite_end else
                             f"Timeout: the suite's {SUITE_TIMEOUT_S:g} s are used up")
                break
            events = sel.select(min(left, 0.5))
            if not events and proc.poll() is not None:
                events = sel.select(0)  # what it wrote before it exited
            chunks = {key.fileobj: os.read(key.fd, 65536) for key, _ in events}
            if not events and proc.poll() is not None:  # a child of it may hold the pipe
                chunks[proc.stdout] = b""
            if proc.stderr in chunks:
                batch.stderr = (batch.stderr + chunks[proc.stderr])[-4000:]
                if not chunks[proc.stderr]:
                    sel.unregister(proc.stderr)
            if proc.stdout not in chunks:
                continue
            chunk = chunks[proc.stdout]
            if not chunk:  # the runner is gone, or about to be
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
                tail = batch.stderr.decode(errors="replace").strip().splitlines()[-1:]
                batch.why = f"the test process exited (code {proc.returncode})" + "".join(
                    f": {line}" for line in tail)
                break
            received += len(chunk)
            if received > MAX_REPORT_BYTES:
                batch.why = f"the test process wrote over {MAX_REPORT_BYTES} bytes of answers"
                break
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                try:
                    msg = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if not isinstance(msg, dict):
                    continue
                if batch.imported is None:
                    if msg.get("imported") is True:
                        batch.imported = True
                    elif "import_error" in msg:
                        batch.imported = False
                        batch.why = str(msg["import_error"])[:200]
                    answer_by = time.monotonic() + CASE_TIMEOUT_S
                    continue
                ident = msg.get("id")
                if type(ident) is int and ident in wanted and ident not in batch.answers:
                    batch.answers[ident] = msg
                    answer_by = time.monotonic() + CASE_TIMEOUT_S
    finally:
        sel.close()
        stop(proc)
        proc.stdout.close()
        proc.stderr.close()
    if batch.imported is None:
        batch.why = f"semver did not import: {batch.why}"
    return batch


def grade(cases: list[Case]) -> list[dict[str, object]]:
    """Every case's detail entry: PASSED, or FAILED with the first line of why."""
    failures: dict[int, str] = {}
    answers: dict[int, dict] = {}
    suite_end = time.monotonic() + SUITE_TIMEOUT_S
    todo = list(enumerate(cases))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        if os.geteuid() == 0:
            shutil.chown(home, NOBODY, NOBODY)
        while todo:
            batch = run_batch(todo, home, suite_end)
            if batch.stderr:
                print(batch.stderr.decode(errors="replace")[-2000:], file=sys.stderr)
            answers.update(batch.answers)
            left = [(i, case) for i, case in todo if i not in answers]
            if not left:
                break
            if not batch.imported or time.monotonic() >= suite_end:
                failures.update((i, batch.why) for i, _ in left)
                break
            failures[left[0][0]] = batch.why  # the case that was running
            todo = left[1:]
    details = []
    for i, case in enumerate(cases):
        why = failures.get(i)
        if why is None:
            try:
                why = case.verdict(answers[i])
            except Exception as exc:  # noqa: BLE001  (a malformed answer fails its case)
                why = f"malformed answer ({type(exc).__name__})"
        entry: dict[str, object] = {"name": case.name,
                                    "status": "FAILED" if why is not None else "PASSED",
                                    "score": 0.0 if why is not None else 1.0}
        if why is not None:
            entry["message"] = (why.splitlines() or [""])[0][:200]
        details.append(entry)
    return details


def main() -> None:
    subprocess.run(["chmod", "-R", "a+rX", "."], check=False)  # readable by `nobody`
    details = grade(all_cases())
    passed = sum(d["status"] == "PASSED" for d in details)
    note = "" if Path("semver.py").is_file() else " (no semver.py in the submission)"
    write_result(score=passed / len(details), valid=True,
                 summary=f"{passed}/{len(details)} tests passed{note}",
                 details=details, metrics={"passed": passed, "total": len(details)})


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a grader bug must still leave a verdict behind
        write_result(valid=False, summary=f"grader error: {exc!r}", details=[], metrics={})
        raise SystemExit(f"grader error: {exc!r}") from None
