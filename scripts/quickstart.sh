#!/usr/bin/env bash
# The main job on a fresh machine: set up, then build edgebench/, grade its sample
# submissions and print the leaderboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SFORGE_BLOB_URL="${SFORGE_BLOB_URL:-file://$PWD/edgebench/blobs-src/dist}"
jobs=$(nproc)
.venv/bin/sforge build -j "$jobs"
.venv/bin/sforge grade -j "$jobs"
.venv/bin/sforge report -j "$jobs"
