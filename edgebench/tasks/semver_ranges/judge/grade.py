#!/usr/bin/python3
"""Grader for `semver_ranges`: check the submitted semver.py on the hidden cases.

score = passed / total (0.0–1.0); details list every case, in the order the cases run, as
PASSED or FAILED. A case's name shows its call and inputs and nothing else: parse[1.02.3],
compare[1.0.0 2.0.0], satisfies[3.1.0 | 1.x || >=3.0.0 <4] (unique; a repeated name would
get " #2", ...). A failure's message says what the submission did ("wrong answer: returned
False", "wrong answer: raised ValueError: ...", a timeout), never what was expected. The
cases run in one fixed order, cases.py shuffled with CASE_ORDER_SEED, so neither the names,
the messages nor the order show which outcome a case expects or which group of cases.py
it comes from. A missing or broken semver.py fails every case: a valid score of 0.

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
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
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
CASE_ORDER_SEED = "semver_ranges/1"  # fixes the one order all_cases() runs the cases in


def write_result(**result: object) -> None:
    """Write result.json with the given fields."""
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


# --- the cases: what run_cases.py calls, and whether its answer is right ------------------

Check = Callable[[dict], bool]  # answer → whether the case passes


@dataclass(frozen=True)
class Case:
    """One hidden case: its name, the call and inputs run_cases.py gets, and its check."""

    name: str
    call: str  # parse, compare or satisfies: see bin/run_cases.py
    args: tuple[str, ...]
    passes: Check


def json_form(value: object) -> object:
    """An expectation as run_cases.py sends values: tuples as lists."""
    return [json_form(v) for v in value] if isinstance(value, tuple | list) else value


def raised(answer: dict) -> str | None:
    """The error a call raised, as run_cases.py describes it, or None if it raised none."""
    err = answer.get("raised")
    return str(err.get("error", "an exception"))[:200] if isinstance(err, dict) else None


def raises_value_error(answer: dict, first_call: bool = False) -> bool:
    """pytest.raises(ValueError) around the call (with `first_call`: compare's first call)."""
    err = answer.get("raised")
    if not isinstance(err, dict) or (first_call and answer.get("returned") != []):
        return False
    return err.get("value_error") is True


def parses_as(text: str, fields: tuple) -> Check:
    """parse(text) returns a version with these fields whose str() is `text`."""
    def check(answer: dict) -> bool:
        got = answer.get("returned")
        return (raised(answer) is None and "inspect_error" not in answer
                and isinstance(got, dict) and got.get("fields") == json_form(fields)
                and got.get("str") == text)
    return check


def orders_as(want: int) -> Check:
    """compare(a, b) == want and compare(b, a) == -want."""
    def check(answer: dict) -> bool:
        got = answer.get("returned")
        return isinstance(got, list) and got[:1] == [want] and got[1:2] == [-want]
    return check


def is_bool(want: bool) -> Check:
    """satisfies(...) returns the bool `want` itself, not a truthy or falsy value."""
    def check(answer: dict) -> bool:
        return raised(answer) is None and answer.get("returned") is want
    return check


def what_it_did(call: str, answer: dict) -> str:
    """What the submission's call returned or raised, from its answer alone."""
    got = answer.get("returned")
    if call == "compare":
        calls = ("compare(a, b)", "compare(b, a)")
        done = got if isinstance(got, list) else []
        parts = [f"{calls[i]} returned {value!r}" for i, value in enumerate(done[:2])]
        if (err := raised(answer)) is not None:
            parts.append(f"{calls[min(len(done), 1)]} raised {err}")
        return "; ".join(parts) or f"returned {got!r}"
    if (err := raised(answer)) is not None:
        return f"raised {err}"
    if call == "parse" and "inspect_error" in answer:
        return f"returned a version whose fields raised {answer['inspect_error']}"
    if call == "parse" and isinstance(got, dict) and {"fields", "str"} <= got.keys():
        return f"returned fields {got['fields']!r}, str {got['str']!r}"
    return f"returned {got!r}"


def case_name(call: str, args: tuple[str, ...]) -> str:
    """A case's name, from its call and inputs only: compare[1.0.0 2.0.0], satisfies[1.2.3 | ^1]."""
    return f"{call}[{(' | ' if call == 'satisfies' else ' ').join(args)}]"


def all_cases() -> list[Case]:
    """The cases of cases.py, uniquely named by case_name(), in the seeded order they run in."""
    spec = spec_from_file_location("semver_cases", JUDGE / "cases.py")
    hidden = module_from_spec(spec)
    spec.loader.exec_module(hidden)
    cases = [("parse", (text,), parses_as(text, fields)) for text, fields in hidden.PARSE_VALID]
    cases += [("parse", (text,), raises_value_error) for text in hidden.PARSE_INVALID]
    cases += [("compare", (a, b), orders_as(want)) for a, b, want in hidden.COMPARE]
    cases.append(("compare", tuple(hidden.COMPARE_INVALID),
                  lambda answer: raises_value_error(answer, first_call=True)))
    cases += [("satisfies", (version, rng), is_bool(want))
              for version, rng, want in hidden.SATISFIES]
    cases += [("satisfies", (version, rng), raises_value_error)
              for version, rng in hidden.SATISFIES_INVALID]
    random.Random(CASE_ORDER_SEED).shuffle(cases)
    out, seen = [], Counter()
    for call, args, check in cases:
        name = case_name(call, args)
        seen[name] += 1
        out.append(Case(name if seen[name] == 1 else f"{name} #{seen[name]}", call, args,
                        check))
    return out


# --- running the submission ----------------------------------------------------------------

def nobody_pids() -> list[int]:
    """Every process with `nobody` among its uids."""
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
    """Run `todo` in one runner process until it answers them all, stops or runs out of time."""
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
                if not case.passes(answers[i]):
                    why = f"wrong answer: {what_it_did(case.call, answers[i])}"
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
    """Grade ./semver.py on every case and write result.json."""
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
