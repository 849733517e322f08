#!/usr/bin/python3
"""Grader for `semver_ranges`: run the hidden pytest suite against the submitted semver.py.

score = passed / total (0.0–1.0); details list every test case as PASSED or FAILED.
A missing or broken semver.py fails every case: a valid score of 0. The tests run
serially (93 small cases take about a second); pytest-timeout bounds each case.
The suite runs as `nobody`, so submission code cannot touch the grader or its result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path("/judge/tests")
RESULT = Path("/opt/sforge/result.json")
NOBODY = 65534
CASE_TIMEOUT_S = 10


def write_result(**result: object) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


def run_pytest(out: Path) -> subprocess.CompletedProcess[str]:
    cwd = Path.cwd()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(out), "LANG": "C.UTF-8",
           "PYTHONPATH": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    user: dict[str, object] = {}
    if os.geteuid() == 0:
        shutil.chown(out, NOBODY, NOBODY)
        user = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    cmd = ["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--timeout={CASE_TIMEOUT_S}", f"--junitxml={out / 'junit.xml'}",
           "--rootdir", str(TESTS), str(TESTS)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, **user)


def cases(junit: Path) -> list[dict[str, object]]:
    details = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        entry: dict[str, object] = {"name": case.get("name", "?"),
                                    "status": "FAILED" if problem is not None else "PASSED",
                                    "score": 0.0 if problem is not None else 1.0}
        if problem is not None:
            entry["message"] = (problem.get("message") or problem.tag).splitlines()[0][:200]
        details.append(entry)
    return details


def main() -> None:
    subprocess.run(["chmod", "-R", "a+rX", "."], check=False)  # readable by `nobody`
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        proc = run_pytest(out)
        print(proc.stdout[-4000:], proc.stderr[-4000:])
        junit = out / "junit.xml"
        details = cases(junit) if junit.is_file() else []
    if not details:
        write_result(score=0.0, valid=True, details=[], metrics={"exit_code": proc.returncode},
                     summary=f"the test run did not finish (exit code {proc.returncode}): score 0")
        return
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
