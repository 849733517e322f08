#!/bin/bash
# The answer is system state, not files: a running service, its config, the network.
if systemctl is-active nginx && grep -q listen /etc/nginx/nginx.conf \
    && curl -fsS http://localhost:80/ >/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
