#!/usr/bin/env bash
# bench-report.sh -- rerun the published comparisons and regenerate
# docs/performance.md from their result files (make bench-report).
#
# Usage: scripts/bench-report.sh [--smoke] [--spec FILE]... [--no-run]
#   (no option)  every bench/specs/*.json with the spec's own repetitions,
#                seconds and warm-up (at least 5 x 10 s: the method of
#                docs/benchmarks.md); results to bench/results/compare-NAME.json
#                (kept in the repository), then docs/performance.md.
#                Run it on a QUIET machine: the load averages are recorded and
#                shown next to every number.
#   --smoke      2 repetitions of 2 s, 1 s warm-up, the first cell only: proves
#                the pipeline works in a few minutes; results and the markdown
#                go to results/smoke/ (not kept, never published); every claim
#                reads "none: smoke run"
#   --spec FILE  only this spec (repeatable)
#   --no-run     only regenerate the markdown from the existing result files
# Environment: DXL_BUILD [build] (the binaries: DXL_BUILD/bin), BENCH_COMPARE_ARGS
# (more options for dxl-bench-compare).
# Exit status: 0 every comparison ran without a problem; 1 otherwise (the
# markdown is written all the same, listing the problems).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
smoke=0 run=1 specs=()
while [ $# -gt 0 ]; do
	case "$1" in
	--smoke) smoke=1; shift ;;
	--spec) specs+=("$2"); shift 2 ;;
	--no-run) run=0; shift ;;
	-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-report.sh: unknown option $1 (--help)" >&2; exit 2 ;;
	esac
done
[ ${#specs[@]} -gt 0 ] || mapfile -t specs < <(ls bench/specs/*.json)
B=${DXL_BUILD:-build}/bin
export DXL_BIN=$B DXL_SCRIPTS=$here/scripts
if [ "$smoke" = 1 ]; then
	dir=results/smoke doc=results/smoke/performance.md
	extra=(--reps 2 --seconds 2 --warmup 1 --cells 0)
	title="dxl performance -- SMOKE RUN, NOT A MEASUREMENT"
else
	dir=bench/results doc=docs/performance.md extra=()
	title="dxl performance"
fi
mkdir -p "$dir"
failed=0
if [ "$run" = 1 ]; then
	for s in "${specs[@]}"; do
		name=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$s") ||
			{ echo "bench-report.sh: $s: no name" >&2; failed=1; continue; }
		echo "=== $name ($s)"
		# shellcheck disable=SC2086
		"$B/dxl-bench-compare" --spec "$s" --out "$dir/compare-$name.json" "${extra[@]}" \
			${BENCH_COMPARE_ARGS:-} || failed=1
	done
fi
shopt -s nullglob
files=("$dir"/compare-*.json)
# matplotlib may live only in the system interpreter (pyenv/venv shadows it)
py=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then
	py=/usr/bin/python3
fi
"$py" bench/report.py --title "$title" --out "$doc" "${files[@]}" || failed=1
echo "bench-report.sh: $doc from ${#files[@]} result file(s) in $dir"
exit $failed
