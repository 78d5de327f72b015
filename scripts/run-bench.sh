#!/usr/bin/env bash
# run-bench.sh -- run every dxl benchmark in BINDIR with its quick (CI)
# configuration, write the results under results/, draw the plots, and end
# with one line per benchmark.
#
# Usage: scripts/run-bench.sh BINDIR [NAME ...]     (make bench runs it)
#   BINDIR  where the dxl-bench-<name> binaries are (build/bin)
#   NAME    only these benchmarks (e.g. fabric); default: all of them
#
# Convention: every dxl-bench-<name> accepts --quick (a configuration that
# finishes well under a minute) and --out PATH (its JSON result); --csv is
# added when its --help mentions it; if bench/plot-<name>.py exists it is
# run on that JSON.
#
# Environment:
#   DXL_BENCH_RESULTS   result folder (default results)
#   DXL_BENCH_ARGS      extra arguments for every benchmark
#   DXL_BENCH_TIMEOUT   seconds per benchmark before it is killed (default 300)
set -u
bindir=${1:?usage: run-bench.sh BINDIR [NAME ...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
out=${DXL_BENCH_RESULTS:-results}
limit=${DXL_BENCH_TIMEOUT:-300}
mkdir -p "$out"

if [ $# -gt 0 ]; then
	bins=()
	for n in "$@"; do bins+=("$bindir/dxl-bench-$n"); done
else
	mapfile -t bins < <(find "$bindir" -maxdepth 1 -type f -name 'dxl-bench-*' -perm -u+x | sort)
fi
if [ ${#bins[@]} -eq 0 ]; then
	echo "run-bench: no dxl-bench-* binaries in $bindir" >&2
	exit 1
fi

# matplotlib may live only in the system interpreter (pyenv/venv shadows it)
py=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then
	py=/usr/bin/python3
fi

summary=()
failed=0
for b in "${bins[@]}"; do
	name=$(basename "$b")
	name=${name#dxl-bench-}
	json="$out/$name.json"
	log="$out/$name.log"
	csv=
	if "$b" --help 2>&1 | grep -q -- '--csv'; then csv=--csv; fi
	echo "=== $name: $b --quick --out $json $csv ${DXL_BENCH_ARGS:-}"
	start=$(date +%s)
	# shellcheck disable=SC2086
	timeout --signal=TERM --kill-after=10 "$limit" \
		"$b" --quick --out "$json" $csv ${DXL_BENCH_ARGS:-} 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(( $(date +%s) - start ))
	plot="$here/bench/plot-$name.py"
	if [ -f "$json" ] && [ "$rc" -ne 1 ] && [ -f "$plot" ]; then
		"$py" "$plot" "$json" || true
	fi
	case $rc in
	0) summary+=("$name: ok (${secs}s) -> $json") ;;
	2) summary+=("$name: MEASURED WITH ERRORS (wrong data or failed completions, ${secs}s) -> $json"); failed=1 ;;
	124|137) summary+=("$name: TIMED OUT after ${limit}s"); failed=1 ;;
	*) summary+=("$name: FAILED (exit $rc, ${secs}s), see $log"); failed=1 ;;
	esac
done
echo
printf '%s\n' "${summary[@]}"
exit $failed
