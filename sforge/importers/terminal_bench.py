"""Terminal-Bench 1.0 tasks: task.yaml, Dockerfile (+ docker-compose.yaml), run-tests.sh,
tests/, solution.sh; pytest's short summary decides pass or fail per test."""

from __future__ import annotations

from pathlib import Path

import yaml

from sforge.core.errors import SforgeError
from sforge.core.fileio import read_utf8
from sforge.importers.draft import Draft, task_id_for

# What Terminal-Bench's own boilerplate compose file holds: one "client" service built from
# the Dockerfile, with its log mounts and TEST_DIR. Anything more needs compose.
_BOILERPLATE_KEYS = {"build", "image", "container_name", "command", "environment", "volumes"}
_SKIP = {"task.yaml", "Dockerfile", "docker-compose.yaml", "docker-compose.yml", "run-tests.sh",
         "solution.sh", "solution.yaml"}


def is_task(path: Path) -> bool:
    """A Terminal-Bench task directory: task.yaml."""
    return (path / "task.yaml").is_file()


def _compose_problems(path: Path) -> list[str]:
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(read_utf8(path)) or {}
    except yaml.YAMLError as exc:
        return [f"docker-compose.yaml is not valid YAML: {exc}"]
    services = data.get("services") or {}
    if len(services) > 1:
        return [f"needs a compose file: {len(services)} services ({', '.join(services)}); "
                "sforge runs one container"]
    problems = []
    for name, svc in services.items():
        extra = sorted(set(svc or {}) - _BOILERPLATE_KEYS)
        if extra:
            problems.append(f"needs a compose file: service {name!r} sets {', '.join(extra)}")
        env = svc.get("environment") or []
        env_names = [e.split("=")[0] for e in env] if isinstance(env, list) else list(env)
        if set(env_names) - {"TEST_DIR"}:
            problems.append(f"needs a compose file: service {name!r} sets environment "
                            f"{', '.join(sorted(set(env_names) - {'TEST_DIR'}))}")
        volumes = [str(v) for v in (svc.get("volumes") or [])]
        own = [v for v in volumes if "T_BENCH_" not in v]
        if own:
            problems.append(f"needs a compose file: service {name!r} mounts {', '.join(own)}")
    for key in ("networks", "volumes", "configs", "secrets"):
        if data.get(key):
            problems.append(f"needs a compose file: top-level {key}")
    return problems


def read(src: Path) -> Draft:
    """The Draft of one Terminal-Bench task; SforgeError when task.yaml cannot be read."""
    try:
        data = yaml.safe_load(read_utf8(src / "task.yaml")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SforgeError(f"{src / 'task.yaml'}: not valid YAML: {exc}") from None
    problems = _compose_problems(src / "docker-compose.yaml")
    notes = []
    dockerfile_path = src / "Dockerfile"
    if not dockerfile_path.is_file():
        problems.append("no Dockerfile")
    parser = data.get("parser_name", "pytest")
    if parser != "pytest":
        problems.append(f"parser {parser!r}: only the pytest parser is converted")
    run_tests = src / "run-tests.sh"
    if not run_tests.is_file():
        problems.append("no run-tests.sh")
    solution, solve_cmd = [], None
    if (src / "solution.sh").is_file():
        solution, solve_cmd = [(src / "solution.sh", "solve.sh")], "bash /solution/solve.sh"
    elif (src / "solution.yaml").is_file():
        notes.append("solution.yaml (tmux keystrokes) cannot run unattended: no reference "
                     "archive made")
    env_files = [(p, p.relative_to(src).as_posix()) for p in sorted(src.rglob("*"))
                 if p.is_file() and p.relative_to(src).parts[0] not in ("tests",)
                 and p.relative_to(src).as_posix() not in _SKIP]
    tests = [(p, p.relative_to(src / "tests").as_posix())
             for p in sorted((src / "tests").rglob("*")) if p.is_file()] \
        if (src / "tests").is_dir() else []
    metadata = {k: data[k] for k in ("difficulty", "category", "tags", "author_name")
                if data.get(k) is not None}
    return Draft(
        fmt="terminal-bench", source=src, task_id=task_id_for(src.name), name=src.name,
        instruction=str(data.get("instruction", "")).rstrip() + "\n",
        dockerfile=read_utf8(dockerfile_path) if dockerfile_path.is_file() else "",
        env_files=env_files, tests=tests,
        test_script=read_utf8(run_tests) if run_tests.is_file() else "",
        test_script_name="run-tests.sh",
        solution=solution, solve_cmd=solve_cmd,
        timeout_sec=float(data.get("max_test_timeout_sec", 60.0)),
        agent_timeout_sec=data.get("max_agent_timeout_sec"),
        metadata=metadata, env_vars={"TEST_DIR": "/tests"},
        problems=problems, notes=notes,
    )


# The judge's grader: run run-tests.sh as Terminal-Bench does, then score pytest's short test
# summary (-rA) as Terminal-Bench's parser reads it: passed / found, one detail per test.
GRADER = r'''#!/bin/sh
# sforge import (Terminal-Bench): run run-tests.sh, score pytest's short summary.
mkdir -p /opt/sforge
log=/tmp/sforge-tests.log
if command -v bash >/dev/null 2>&1; then bash /tests/run-tests.sh >"$log" 2>&1
else sh /tests/run-tests.sh >"$log" 2>&1; fi
code=$?
cat "$log"
if ! command -v python3 >/dev/null 2>&1; then
  printf '{"valid": false, "summary": "python3 missing in the judge image"}\n' \
    > /opt/sforge/result.json
  exit 0
fi
exec python3 - "$log" "$code" <<'PY'
import json, re, sys
text = open(sys.argv[1], errors="replace").read()
parts = re.split(r"=+\s*short test summary info\s*=+", text, maxsplit=1, flags=re.I)
ok = {"PASSED": "PASSED", "XFAIL": "PASSED", "SKIPPED": "PASSED", "FAILED": "FAILED",
      "XPASS": "FAILED", "ERROR": "FAILED"}
tests = {}
for line in (parts[1].splitlines() if len(parts) > 1 else []):
    words = line.split(maxsplit=1)
    status = words[0].strip(":") if words else ""
    if status in ok and len(words) > 1:
        name = words[1].split(" - ")[0].strip().split("::", 1)[-1]
        if name:
            tests[name] = ok[status]
passed = sum(1 for s in tests.values() if s == "PASSED")
found = len(tests)
summary = (f"{passed}/{found} tests passed" if found else
           f"no pytest summary found (run-tests.sh exit {sys.argv[2]})")
json.dump({"valid": True, "score": passed / found if found else 0.0, "summary": summary,
           "details": [{"name": n, "status": s, "score": 1.0 if s == "PASSED" else 0.0}
                       for n, s in tests.items()],
           "metrics": {"passed": passed, "found": found, "exit_code": int(sys.argv[2])}},
          open("/opt/sforge/result.json", "w"))
PY
'''
