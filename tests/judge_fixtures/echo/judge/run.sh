#!/bin/sh
echo "echo judge in $(pwd)"
echo "to stderr" >&2
if [ -f result.json ]; then cp result.json /opt/sforge/result.json; fi
exit 0
