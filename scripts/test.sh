#!/usr/bin/env bash
# The test suite: tests/unit (no Docker) and tests/integration (real daemon, real images);
# the 25 slowest tests are listed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
export SFORGE_BLOB_URL="${SFORGE_BLOB_URL:-file://$PWD/edgebench/blobs-src/dist}"
.venv/bin/ruff check sforge tests tools bench || exit 1
[ -x .venv/bin/mypy ] || { echo "mypy missing: run bash scripts/setup.sh" >&2; exit 1; }
.venv/bin/mypy sforge || exit 1
.venv/bin/python -m pytest -q -ra --durations=25 "$@"
rc=$?
[ $rc -eq 5 ] && { echo "no tests ran" >&2; exit 1; }
exit $rc
