#!/bin/sh
seq 1 "$(cat lines 2>/dev/null || echo 10)"
echo '{"valid": true, "score": 1, "summary": "noisy"}' > /opt/sforge/result.json
