#!/usr/bin/env bash
# coord-views.sh -- a dxl-coord's resident memory under forced view
# refreshes (issue 12, defect 4; docs/transactions.md "Views").
#
# Starts a throw-away ZooKeeper (scripts/zk.sh), a local cluster ('dxl
# cluster up': 3 replicas, 2 shards, tables 1:8:4096,2:8:4096 -- one
# location cache of coord.loccache_bytes per shard and table per view) and a
# dxl-coord, then runs 'dxl-bench-coordviews run': transactions without
# pause while the configuration's epoch is raised every --bump-ms (each
# raise makes every replica register again, and the coordinator re-read
# the configuration: a new view). One line per --sample-s: the coordinator's
# RSS, its view refreshes and the views it holds. Everything is stopped at
# the end.
#
# Usage: scripts/coord-views.sh [options]
#   --duration S    seconds of the run [3600; quick 60]
#   --bump-ms MS    epoch raises [200]
#   --sample-s S    seconds between samples [30; quick 5]
#   --out FILE      the run's JSON [results/coordviews.json]
#   --quick         60 s
#   --keep          keep the work directory
#   --bin DIR       where dxl, dxl-replica, dxl-coord, dxl-bench-coordviews
#                   are [$DXL_BUILD/bin or build/bin]
# Exit status: 0 the run completed, 1 it could not run.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
duration= bump=200 sample= out=results/coordviews.json quick=0 keep=0 bin=
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) duration=$2; shift 2 ;;
	--bump-ms) bump=$2; shift 2 ;;
	--sample-s) sample=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	--keep) keep=1; shift ;;
	--bin) bin=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "coord-views.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ "$quick" = 1 ]; then : "${duration:=60}" "${sample:=5}"; else : "${duration:=3600}" "${sample:=30}"; fi
bin=${bin:-${DXL_BUILD:+$DXL_BUILD/bin}}
bin=${bin:-$here/build/bin}
work=$(mktemp -d /tmp/dxl-coordviews.XXXXXX)
zkpid= coordpid=
cleanup() {
	[ -n "$coordpid" ] && kill "$coordpid" 2>/dev/null && wait "$coordpid" 2>/dev/null
	"$bin/dxl" cluster down --dir "$work/cluster" >/dev/null 2>&1
	"$here/scripts/zk.sh" stop "$work/zk" >/dev/null 2>&1
	if [ "$keep" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
zk=$("$here/scripts/zk.sh" start "$work/zk") || { echo "coord-views.sh: ZooKeeper did not start" >&2; exit 1; }
name=cv-$$
"$bin/dxl" cluster up --dir "$work/cluster" --zk "$zk" --cluster "$name" --replicas 3 --shards 2 \
	--ring-size 4M --writer-slots 16 --session-timeout 2000 \
	-o engine.tables=1:8:4096,2:8:4096 -o engine.lock_mode=nic >"$work/up.log" 2>&1 ||
	{ echo "coord-views.sh: cluster up failed:"; cat "$work/up.log"; exit 1; } >&2
"$bin/dxl-coord" --zk "$zk" --cluster "$name" --listen 127.0.0.1:0 --threads 2 --coroutines 4 \
	--log-level warn >"$work/coord.out" 2>"$work/coord.err" &
coordpid=$!
for _ in $(seq 100); do
	addr=$(sed -n 's/^dxl-coord: coordinator [0-9]* serving on //p' "$work/coord.out")
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "${addr:-}" ] || { echo "coord-views.sh: dxl-coord did not start:"; cat "$work/coord.err"; exit 1; } >&2
mkdir -p "$(dirname "$out")"
echo "dxl-coord pid $coordpid on $addr; $duration s, epoch +1 every $bump ms"
"$bin/dxl-bench-coordviews" run --dir "$work/cluster" --coord "$addr" --pid "$coordpid" \
	--duration "$duration" --bump-ms "$bump" --sample-s "$sample" --out "$out"
rc=$?
echo "result: $out"
exit $rc
