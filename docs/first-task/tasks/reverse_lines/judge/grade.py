"""Grade solve.py on hidden cases: score = the fraction of cases it gets right."""
import json
import os
import subprocess
import sys

CASES = ["a\nb\nc\n", "one\n", "", "x\ny\n"]

details = []
for i, text in enumerate(CASES):
    want = "".join(f"{line}\n" for line in reversed(text.splitlines()))
    try:
        run = subprocess.run([sys.executable, "solve.py"], input=text, text=True,
                             capture_output=True, timeout=10, user=65534, group=65534,
                             extra_groups=[], env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
        ok = run.returncode == 0 and run.stdout == want
        message = "" if ok else f"got {run.stdout[:200]!r}, expected {want!r}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, message = False, str(exc)
    details.append({"name": f"case_{i}", "status": "PASSED" if ok else "FAILED",
                    "score": 1.0 if ok else 0.0, "message": message})

passed = sum(d["status"] == "PASSED" for d in details)
os.makedirs("/opt/sforge", exist_ok=True)
with open("/opt/sforge/result.json", "w") as fh:
    json.dump({"valid": True, "score": passed / len(CASES),
               "summary": f"{passed}/{len(CASES)} cases", "details": details,
               "metrics": {"passed": passed}}, fh)
