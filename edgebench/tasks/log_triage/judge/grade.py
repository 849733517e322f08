#!/usr/bin/python3
"""Grader for `log_triage`: run triage.py on every hidden log and compare its answers.

score = correct answers / all answers (9 keys per log), 0.0–1.0. A log whose run fails,
times out or prints no JSON object gets all of its keys wrong; a missing triage.py is a
valid score of 0. The hidden logs and answers come from the task's blob
(judge/blobs/hidden.tar.gz, extracted to /judge/hidden by the Dockerfile). The submission
runs as `nobody`, which cannot read /judge: it gets each log on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HIDDEN = Path("/judge/hidden")
RESULT = Path("/opt/sforge/result.json")
NOBODY = 65534
TIME_LIMIT_S = 20.0
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
       "PYTHONDONTWRITEBYTECODE": "1"}


def write_result(**result: object) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


def parallelism() -> int:
    # SFORGE_CPUS is the container's CPU limit; nproc would report the host's cores.
    try:
        return max(1, int(float(os.environ.get("SFORGE_CPUS", "1"))))
    except ValueError:
        return 1


def run(dataset: Path) -> tuple[dict | None, str]:
    user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    try:
        with (dataset / "access.log").open("rb") as log:
            proc = subprocess.run(["/usr/bin/python3", "triage.py"], stdin=log,
                                  capture_output=True, timeout=TIME_LIMIT_S, env=ENV, **user)
    except subprocess.TimeoutExpired:
        return None, "time limit exceeded"
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return None, f"exit code {proc.returncode}: {tail[0][:200]}"
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        return None, "output is not JSON"
    if not isinstance(answer, dict):
        return None, "output is not a JSON object"
    return answer, ""


def main() -> None:
    datasets = sorted(p for p in HIDDEN.iterdir() if p.is_dir())
    expected = {d.name: json.loads((d / "expected.json").read_text()) for d in datasets}
    total = sum(len(e) for e in expected.values())
    if not Path("triage.py").is_file():
        write_result(score=0.0, valid=True, summary="no triage.py in the submission: score 0",
                     details=[{"name": f"{d}.{k}", "status": "FAILED", "score": 0.0}
                              for d, e in expected.items() for k in e],
                     metrics={"answers": total})
        return
    subprocess.run(["chmod", "-R", "a+rX", "."], check=False)  # readable by `nobody`
    with ThreadPoolExecutor(parallelism()) as pool:
        answers = dict(zip((d.name for d in datasets), pool.map(run, datasets), strict=True))
    details, right = [], 0
    for name, want in expected.items():
        got, err = answers[name]
        for key, value in want.items():
            ok = got is not None and key in got and got[key] == value
            right += ok
            entry = {"name": f"{name}.{key}", "status": "PASSED" if ok else "FAILED",
                     "score": 1.0 if ok else 0.0}
            if not ok:
                entry["message"] = err or ("missing" if key not in got else
                                           f"got {json.dumps(got[key])[:100]}")
            details.append(entry)
    write_result(score=right / total, valid=True, details=details,
                 summary=f"{right}/{total} answers right over {len(datasets)} logs",
                 metrics={"right": right, "answers": total})


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a grader bug must still leave a verdict behind
        write_result(valid=False, summary=f"grader error: {exc!r}", details=[], metrics={})
        raise SystemExit(f"grader error: {exc!r}") from None
