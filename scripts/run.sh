#!/usr/bin/env bash
# run.sh -- dxl's main job on this machine, from a fresh Debian 12 checkout:
# install what is missing, build, then run a local dxl cluster through a
# failover:
#   1. ZooKeeper (the Debian package, started here) + 3 dxl-replica
#      processes, 2 shards, 3-way replication
#   2. a steady append stream with a live progress line; the primary of both
#      shards (replica 1) is killed with SIGKILL mid-run
#   3. the failover: time without acknowledged appends, new primary, epoch
#   4. every acknowledged append is still there: tailing every shard
#   5. replica 1 restarts, catches up and rejoins as a backup
#   6. everything is shut down
# Results: results/main-load.json (the load's summary), the transcript on
# stdout. With --bench it also runs the fabric and log benchmarks
# (results/fabric.json, results/log.json; --full: their whole matrices).
# Usage: scripts/run.sh [--bench] [--full] [--keep]
#   --keep: leave the cluster's directory (logs, data) in place
set -euo pipefail
cd "$(dirname "$0")/.."

bench=0 mode=--quick keep=0
for a in "$@"; do
	case "$a" in
	--bench) bench=1 ;;
	--full) bench=1; mode="" ;;
	--keep) keep=1 ;;
	-h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: scripts/run.sh [--bench] [--full] [--keep]" >&2; exit 2 ;;
	esac
done

scripts/install-deps.sh
make -j"${JOBS:-$(nproc)}" all
mkdir -p results

B=build/bin
dir=$(mktemp -d /tmp/dxl-main.XXXXXX)
cleanup() {
	"$B/dxl" cluster down --dir "$dir" >/dev/null 2>&1 || true
	if [ "$keep" = 1 ]; then echo "(kept: $dir)"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

say() { printf '\n=== %s\n' "$*"; }

say "1. a local cluster: ZooKeeper + 3 replicas, 2 shards, 3-way replication"
"$B/dxl" cluster up --dir "$dir" --replicas 3 --shards 2 --ring-size 4M \
	--writer-slots 4 --session-timeout 2000
"$B/dxl" cluster status --dir "$dir"

RATE=${DXL_MAIN_RATE:-1000} DUR=${DXL_MAIN_SECONDS:-16} KILL_AT=${DXL_MAIN_KILL_AT:-6}
say "2. $RATE appends/s for $DUR s over both shards; replica 1 (primary) is killed at ${KILL_AT} s"
"$B/dxl" log load --dir "$dir" --rate "$RATE" --duration "$DUR" \
	--acked "$dir/acked.tsv" --json results/main-load.json &
load=$!
sleep "$KILL_AT"
echo "--- $(date +%T.%3N) dxl cluster kill 1 --signal KILL"
"$B/dxl" cluster kill 1 --dir "$dir"
wait "$load" || { echo "the load failed (see above)"; exit 1; }

say "3. the failover"
python3 - results/main-load.json <<'EOF' || true
import json, sys
r = json.load(open(sys.argv[1]))
for f in r["failovers"]:
    print("shard %d: no acknowledged append for %.2f s; primary %d -> %d, epoch %d -> %d"
          % (f["shard"], f["gap_ms"] / 1000, f["primary_from"], f["primary_to"],
             f["epoch_from"], f["epoch_to"]))
print("appends: %d acknowledged, %d failed; p50 %.2f ms, p99 %.2f ms (the p99 includes the failover)"
      % (r["acked"], r["failed"], r["p50_ms"], r["p99_ms"]))
EOF
"$B/dxl" cluster status --dir "$dir" || true

say "4. every acknowledged append is in the log: dxl tail of every shard"
ok=1
for s in 0 1; do
	"$B/dxl" tail --dir "$dir" --shard "$s" --from earliest > "$dir/tail-$s.tsv"
	# text format: shard, commit_ts, writer, txn_id, payload
	awk -F'\t' -v s="$s" '$1 == s {print $2}' "$dir/acked.tsv" | sort > "$dir/acked-$s"
	cut -f2 "$dir/tail-$s.tsv" > "$dir/got-$s"
	n_acked=$(wc -l < "$dir/acked-$s")
	n_got=$(wc -l < "$dir/got-$s")
	missing=$(sort "$dir/got-$s" | comm -23 "$dir/acked-$s" - | wc -l)
	dups=$(sort "$dir/got-$s" | uniq -d | wc -l)
	order=ok; sort -n -c "$dir/got-$s" 2>/dev/null || order="NOT in order"
	echo "shard $s: $n_acked acknowledged, $n_got in the log, $missing missing, $dups duplicated, commit timestamps $order"
	[ "$missing" = 0 ] && [ "$dups" = 0 ] && [ "$order" = ok ] || ok=0
done
[ "$ok" = 1 ] && echo "verdict: nothing acknowledged was lost or duplicated" \
	|| { echo "verdict: FAILED"; exit 1; }

say "5. replica 1 restarts on its data directory, catches up and rejoins"
"$B/dxl" cluster restart 1 --dir "$dir"
for _ in $(seq 1 100); do
	"$B/dxl" cluster status --dir "$dir" > "$dir/status" 2>&1 && \
		[ "$(grep -c ' 1(backup,up' "$dir/status")" = 2 ] && break
	sleep 0.2
done
cat "$dir/status"
echo "a last append after the rejoin:"
echo "after the rejoin" | "$B/dxl" log append --dir "$dir" --shard 0

say "6. shutting down"
"$B/dxl" cluster down --dir "$dir"

if [ "$bench" = 1 ]; then
	say "7. fabric: two processes on loopback, tcp provider"
	"$B/dxl-bench-fabric" $mode --out results/fabric.json
	say "8. replicated log: replica processes and a writer, against ZooKeeper"
	"$B/dxl-bench-log" $mode --out results/log.json
fi
echo
echo "Done. Results: results/main-load.json$([ "$bench" = 1 ] && echo ' results/fabric.json results/log.json')"
