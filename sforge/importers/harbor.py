"""Harbor tasks: task.toml, instruction.md, environment/, tests/test.sh writing a reward to
/logs/verifier/reward.txt (or reward.json), solution/solve.sh."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sforge.core.errors import SforgeError
from sforge.core.fileio import read_utf8
from sforge.importers.draft import Draft, task_id_for


def is_task(path: Path) -> bool:
    """A Harbor task directory: task.toml and instruction.md."""
    return (path / "task.toml").is_file() and (path / "instruction.md").is_file()


def _files(root: Path, skip: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    if not root.is_dir():
        return []
    return [(p, p.relative_to(root).as_posix()) for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).as_posix() not in skip]


def read(src: Path) -> Draft:
    """The Draft of one Harbor task; SforgeError when its task.toml cannot be read."""
    try:
        data = tomllib.loads(read_utf8(src / "task.toml"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SforgeError(f"{src / 'task.toml'}: not valid TOML: {exc}") from None
    env = data.get("environment") or {}
    verifier = data.get("verifier") or {}
    agent = data.get("agent") or {}
    package = data.get("task") or {}
    name = package.get("name") or src.name
    problems, notes = [], []
    env_dir = src / "environment"
    dockerfile_path = env_dir / "Dockerfile"
    if dockerfile_path.is_file():
        dockerfile = read_utf8(dockerfile_path)
    elif env.get("docker_image"):
        dockerfile = f"FROM {env['docker_image']}\n"
        notes.append(f"environment/Dockerfile written: FROM {env['docker_image']} "
                     "([environment] docker_image)")
    else:
        dockerfile = ""
        problems.append("no environment/Dockerfile and no [environment] docker_image")
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
        if (env_dir / compose).is_file():
            problems.append(f"needs a compose file (environment/{compose}): sforge runs one "
                            "container")
    if data.get("steps"):
        problems.append("multi-step task ([[steps]]): sforge grades one final submission")
    if (src / "tests" / "Dockerfile").is_file():
        problems.append("separate verifier image (tests/Dockerfile): not converted")
    if str(env.get("os", "linux")).lower() != "linux":
        problems.append(f"[environment] os = {env.get('os')!r}: sforge runs Linux containers")
    test_sh = src / "tests" / "test.sh"
    if not test_sh.is_file():
        problems.append("no tests/test.sh")
    solution = _files(src / "solution")
    memory = None
    if env.get("memory_mb"):
        memory = f"{int(env['memory_mb'])}m"
    elif isinstance(env.get("memory"), str):
        memory = env["memory"].lower().replace("b", "") or None
    if env.get("storage_mb") or env.get("storage"):
        notes.append("[environment] storage limit not carried over: sforge has none")
    if env.get("gpus") or env.get("gpu_types"):
        problems.append("needs GPUs")
    metadata = dict(data.get("metadata") or {})
    return Draft(
        fmt="harbor", source=src, task_id=task_id_for(src.name), name=str(name),
        instruction=read_utf8(src / "instruction.md"),
        dockerfile=dockerfile,
        env_files=_files(env_dir, skip=("Dockerfile",)),
        tests=_files(src / "tests", skip=("test.sh",)),
        test_script=read_utf8(test_sh) if test_sh.is_file() else "",
        test_script_name="test.sh",
        solution=solution,
        solve_cmd="bash /solution/solve.sh" if (src / "solution" / "solve.sh").is_file()
        else None,
        timeout_sec=float(verifier.get("timeout_sec", 600.0)),
        agent_timeout_sec=agent.get("timeout_sec"),
        cpus=env.get("cpus"),
        memory=memory,
        metadata=metadata,
        env_vars={str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        problems=problems,
        notes=notes,
        workdir=env.get("workdir"),
    )


# The judge's grader: run the copied tests as Harbor does (cwd, /logs/verifier), then turn the
# reward file into /opt/sforge/result.json. Plain sh and awk, so any image with a shell works;
# reward.json needs python3 in the image.
GRADER = r'''#!/bin/sh
# sforge import (Harbor): run tests/test.sh, turn its reward file into /opt/sforge/result.json.
out=/opt/sforge/result.json
v=/logs/verifier
mkdir -p "$v" /opt/sforge
rm -f "$v/reward.txt" "$v/reward.json"
if command -v bash >/dev/null 2>&1; then bash /tests/test.sh; else sh /tests/test.sh; fi
code=$?
invalid() { printf '{"valid": false, "summary": "%s"}\n' "$1" > "$out"; exit 0; }
if [ -s "$v/reward.txt" ]; then
  r=$(awk 'NR==1 { if ($1 ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/)
                     printf "%.17g", $1 + 0; else print "bad" }' "$v/reward.txt")
  [ -n "$r" ] && [ "$r" != bad ] || invalid "reward.txt is not a number"
  printf '{"valid": true, "score": %s, "summary": "reward %s (tests/test.sh exit %s)"}\n' \
    "$r" "$r" "$code" > "$out"
elif [ -s "$v/reward.json" ]; then
  command -v python3 >/dev/null 2>&1 || invalid "reward.json needs python3 in the judge image"
  python3 - "$v/reward.json" "$out" "$code" <<'PY'
import json, math, sys
src, out, code = sys.argv[1:]
try:
    data = json.load(open(src))
    rewards = data if isinstance(data, dict) else {"reward": data}
    values = {k: float(v) for k, v in rewards.items()}
    assert values and all(math.isfinite(v) for v in values.values())
except Exception as exc:
    json.dump({"valid": False, "summary": f"reward.json unusable: {exc}"}, open(out, "w"))
    sys.exit(0)
score = values.get("reward", sum(values.values()) / len(values))
json.dump({"valid": True, "score": score,
           "summary": f"reward {score:g} (tests/test.sh exit {code})",
           "details": [{"name": k, "score": v} for k, v in values.items()]}, open(out, "w"))
PY
else
  invalid "tests/test.sh wrote no reward (exit $code)"
fi
'''
