#!/bin/bash
# Runs a command that must fail: it must end (ctest's timeout bounds the
# wait) with a non-zero status, and its output must match PATTERN (an
# extended regular expression) on at least EXPECTED_LINES lines.
# Usage: expect_failure.sh PATTERN EXPECTED_LINES COMMAND...
set -u
pattern=$1
expected_lines=$2
shift 2
output=$("$@" 2>&1)
status=$?
echo "$output"
echo "exit status: $status"
if [[ $status == 0 ]]; then
    echo "FAILED: the command succeeded"
    exit 1
fi
lines=$(grep -cE -- "$pattern" <<< "$output")
if (( lines < expected_lines )); then
    echo "FAILED: $lines lines match '$pattern', $expected_lines expected"
    exit 1
fi
echo "as expected: status $status, $lines lines match '$pattern'"
