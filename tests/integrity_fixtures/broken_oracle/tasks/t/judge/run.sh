#!/bin/sh
# Score 1 when answer.txt (a regular file, not a link) says 43; else 0.
mkdir -p /opt/sforge
s=0
if [ -f answer.txt ] && [ ! -L answer.txt ] && [ "$(head -c 16 answer.txt)" = "43" ]; then s=1; fi
printf '{"score": %s, "valid": true, "summary": "answer checked"}\n' "$s" > /opt/sforge/result.json
