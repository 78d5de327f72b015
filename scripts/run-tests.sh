#!/usr/bin/env bash
# run-tests.sh -- run every test binary in DIR (or the named ones), each under
# a time limit, show its cmocka output, and end with "N passed, N failed".
# Usage: scripts/run-tests.sh DIR [TEST_NAME ...]
# Environment: DXL_TEST_TIMEOUT (seconds per binary, default 600).
set -u
dir=${1:?usage: run-tests.sh DIR [TEST ...]}
shift
limit=${DXL_TEST_TIMEOUT:-600}
export CMOCKA_MESSAGE_OUTPUT=stdout

if [ $# -gt 0 ]; then
	bins=()
	for t in "$@"; do bins+=("$dir/$t"); done
else
	mapfile -t bins < <(find "$dir" -maxdepth 1 -type f -name 'test_*' -perm -u+x | sort)
fi
[ ${#bins[@]} -gt 0 ] || { echo "run-tests: no test binaries in $dir" >&2; exit 1; }

passed=0 failed=0 skipped=0
failed_bins=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for b in "${bins[@]}"; do
	name=$(basename "$b")
	echo "=== $name"
	start=$(date +%s)
	timeout --signal=KILL "$limit" "$b" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(( $(date +%s) - start ))
	p=$(grep -oE '\[  PASSED  \] [0-9]+ test' "$log" | awk '{s+=$(NF-1)} END {print s+0}')
	f=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$log" | awk '{s+=$(NF-1)} END {print s+0}')
	s=$(grep -oE '\[  SKIPPED \] [0-9]+ test' "$log" | awk '{s+=$(NF-1)} END {print s+0}')
	passed=$((passed + p)); skipped=$((skipped + s))
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed, timed out or failed outside a test case
		echo "=== $name: exit status $rc (137 = killed after ${limit}s)"
	fi
	failed=$((failed + f))
	[ "$f" -gt 0 ] && failed_bins+=("$name")
	echo "=== $name: $p passed, $f failed, $s skipped (${secs}s)"
done
echo
[ ${#failed_bins[@]} -gt 0 ] && echo "failing binaries: ${failed_bins[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
