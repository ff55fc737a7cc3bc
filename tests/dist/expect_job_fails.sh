#!/bin/sh
# Runs a command that must fail (a fault test's job): prints its output, then its exit status as
# "the job exited with status N", so the ctest's PASS_REGULAR_EXPRESSION can require a non-zero
# status after the expected message. Exits 0 (the regular expression decides).
"$@" 2>&1
echo "the job exited with status $?"
