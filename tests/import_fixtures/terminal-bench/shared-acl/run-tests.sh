#!/bin/bash
# Test-time installs (judges have no network: sforge import moves them into the judge build).
apt-get update
apt-get install -y python3-pytest

pytest-3 $TEST_DIR/test_outputs.py -rA
