#!/bin/sh
# Writes what the judge sees into result.json, for tests/test_judge.py to check.
q() { sed 's/.*/"&"/' | tr '\n' ',' | sed 's/,$//'; }
files=$(find . -mindepth 1 | sed 's|^\./||' | sort | q)
escaped=$(find / -xdev -name 'pwned*' 2>/dev/null | sort | q)
nets=$(ls /sys/class/net | sort | q)
if [ -f /sys/fs/cgroup/cpu.max ]; then
  read -r quota period < /sys/fs/cgroup/cpu.max
  mem=$(cat /sys/fs/cgroup/memory.max)
else
  quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)
  period=$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)
  mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
fi
pids=$(cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max)
nnp=$(awk '/^NoNewPrivs/ {print $2}' /proc/self/status)
capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)
score=0
solution=""
if [ -f solution.txt ]; then
  solution=$(cat solution.txt)
  case "$solution" in ''|*[!0-9]*) ;; *) score=$solution ;; esac
fi
echo "inspect judge: $(echo "$files" | tr ',' ' ')"
cat > /opt/sforge/result.json <<JSON
{"valid": true, "score": $score, "summary": "$(cat tests/check.txt)",
 "details": [$files],
 "metrics": {"escaped": [$escaped], "net": [$nets], "cpus": "$SFORGE_CPUS",
             "memory": "$SFORGE_MEMORY", "quota": "$quota", "period": "$period",
             "mem_limit": "$mem", "pids": "$pids", "nnp": "$nnp",
             "capeff": "$capeff", "pwd": "$(pwd)", "solution": "$solution"}}
JSON
