#!/bin/sh
# The reference: the answer, in cwd.
echo 42 > answer.txt
