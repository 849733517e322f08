#!/bin/sh
# dd's 200 MiB block buffer is filled from /dev/zero: far beyond the 20m limit, no swap.
dd if=/dev/zero of=/dev/null bs=200M count=1
echo "dd exited with $?"
