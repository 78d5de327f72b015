#!/usr/bin/env bash
# run.sh -- dxl's main job on this machine, from a fresh Debian 12 checkout:
# install what is missing, build, then run SmallBank on a local dxl cluster
# through a failover:
#   1. ZooKeeper (the Debian package, started here) + 3 dxl-replica
#      processes, 3 shards, 3-way replication, hosting the tables savings
#      and checking (NIC-owned lock words)
#   2. the accounts are loaded through transactions
#   3. SmallBank for 16 s: 2 worker threads x 8 coroutines of the hybrid-OCC
#      coordinator (in the benchmark process), a progress line per second
#      (txn/s, abort rate, p50/p99, failed runs, configuration epoch)
#   4. at 6 s the primary of shard 0 (replica 1 at the start, as 'dxl
#      cluster status' says) is killed with SIGKILL: the progress lines show
#      the failover (no commits, then a new configuration epoch)
#   5. the killed replica restarts, catches up and rejoins as a backup
#   6. the checker reads every account: money conserved given the committed
#      transactions, every acknowledged commit reflected in the versions;
#      its verdict; the exit status is 1 if it failed
#   7. everything is shut down
# Results: results/main-smallbank.json (the run), the transcript on stdout.
# Usage: scripts/run.sh [--log] [--bench] [--full] [--keep]
#   --log:   the replicated-log failover demo instead (append stream, kill,
#            every acknowledged append found by tailing; results/main-load.json)
#   --bench: also the fabric, log and SmallBank benchmarks (results/fabric.json,
#            results/log.json, results/smallbank.json and .md; --full: their
#            whole matrices)
#   --keep:  leave the cluster's directory (logs, data, ledger) in place
# Environment: DXL_MAIN_SECONDS (16), DXL_MAIN_KILL_AT (6), DXL_MAIN_ACCOUNTS
# (20000), DXL_MAIN_THREADS (2), DXL_MAIN_COROUTINES (8), DXL_MAIN_MODE
# (hybrid or onesided), DXL_MAIN_NO_KILL=1 (the same run without the kill).
set -euo pipefail
cd "$(dirname "$0")/.."

bench=0 mode=--quick keep=0 demo=smallbank
for a in "$@"; do
	case "$a" in
	--log) demo=log ;;
	--bench) bench=1 ;;
	--full) bench=1; mode="" ;;
	--keep) keep=1 ;;
	-h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: scripts/run.sh [--log] [--bench] [--full] [--keep]" >&2; exit 2 ;;
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

# the primary of a shard now, from 'dxl cluster status' ("  shard 0: 1(primary,up,...")
primary_of() {
	"$B/dxl" cluster status --dir "$dir" 2>/dev/null |
		sed -n "s/^  shard $1: \([0-9]*\)(primary.*/\1/p" | head -1
}

# wait until node $1 is an up backup of every one of $2 shards (20 s at most)
wait_rejoined() {
	for _ in $(seq 1 100); do
		"$B/dxl" cluster status --dir "$dir" > "$dir/status" 2>&1 &&
			[ "$(grep -c " $1(backup,up" "$dir/status")" = "$2" ] && return 0
		sleep 0.2
	done
	return 1
}

# ---- the main job: SmallBank through a failover ----------------------------------

smallbank_demo() {
	local SB=$B/dxl-bench-smallbank
	local DUR=${DXL_MAIN_SECONDS:-16} KILL_AT=${DXL_MAIN_KILL_AT:-6}
	local ACC=${DXL_MAIN_ACCOUNTS:-20000} TH=${DXL_MAIN_THREADS:-2}
	local CO=${DXL_MAIN_COROUTINES:-8} MODE=${DXL_MAIN_MODE:-hybrid} SHARDS=3
	# record slots per table and shard: 1.3 x the accounts of a shard, and some
	local cap=$(( ACC * 13 / 10 / SHARDS + 1000 ))

	say "1. a local cluster: ZooKeeper + 3 replicas, $SHARDS shards, 3-way replication; tables savings and checking"
	"$B/dxl" cluster up --dir "$dir" --replicas 3 --shards "$SHARDS" --ring-size 16M \
		--writer-slots 16 --session-timeout 2000 \
		-o "engine.tables=1:8:$cap,2:8:$cap" -o engine.lock_mode=nic || return 1
	"$B/dxl" cluster status --dir "$dir"

	say "2. $ACC accounts (a savings and a checking row each, 100.00 in each) loaded through transactions"
	"$SB" load --dir "$dir" --accounts "$ACC" || return 1

	local victim
	victim=$(primary_of 0)
	victim=${victim:-1}
	if [ "${DXL_MAIN_NO_KILL:-0}" = 1 ]; then
		say "3. SmallBank ($MODE OCC) for $DUR s: $TH threads x $CO coroutines (no kill: DXL_MAIN_NO_KILL=1)"
	else
		say "3. SmallBank ($MODE OCC) for $DUR s: $TH threads x $CO coroutines; replica $victim (primary of shard 0) is killed at ${KILL_AT} s"
	fi
	echo "(the coordinator's own log goes to $dir/run.log)"
	: > "$dir/progress.txt"
	"$SB" run --dir "$dir" --mode "$MODE" --threads "$TH" --coroutines "$CO" \
		--duration "$DUR" --progress --json results/main-smallbank.json \
		--ledger "$dir/ledger.json" > >(tee "$dir/progress.txt") 2> "$dir/run.log" &
	local run=$!
	if [ "${DXL_MAIN_NO_KILL:-0}" != 1 ]; then
		# the transactions start after the accounts were read: at the header line
		for _ in $(seq 1 300); do
			grep -q time_s "$dir/progress.txt" 2>/dev/null && break
			kill -0 "$run" 2>/dev/null || break
			sleep 0.1
		done
		sleep "$KILL_AT"
		echo "--- $(date +%T.%3N) (t = ${KILL_AT} s) dxl cluster kill $victim: SIGKILL to the primary of shard 0"
		"$B/dxl" cluster kill "$victim" --dir "$dir"
	fi
	local rc=0
	wait "$run" || rc=$?
	sleep 0.2 # the last lines of tee
	if [ "$rc" != 0 ]; then
		echo "the SmallBank run failed (exit $rc); its log:"
		tail -20 "$dir/run.log"
		return 1
	fi

	if [ "${DXL_MAIN_NO_KILL:-0}" = 1 ]; then
		say "4. the run, as the coordinator saw it"
	else
		say "4. the failover, as the coordinator and ZooKeeper saw it"
	fi
	python3 - results/main-smallbank.json <<'EOF' || true
import json, sys
r = json.load(open(sys.argv[1]))
print("configuration epoch %d -> %d; longest time without a commit: %.2f s (from t = %.2f s)"
      % (r["epoch_start"], r["epoch_end"], r["max_gap_s"], r["max_gap_from_s"]))
print("%d committed (%.0f txn/s over the run), abort rate %.2f%%, p50 %.0f us, p99 %.0f us "
      "(the p99 includes the failover)" % (r["committed"], r["txn_per_s"],
      100 * r["abort_rate"], r["p50_us"], r["p99_us"]))
print("runs retried after a failure: %d unavailable, %d conflicts past the retry budget, "
      "%d other; %d of unknown outcome (the checker allows them either way)"
      % (r["unavailable"], r["gave_up"], r["other_errors"], r["maybe"]))
EOF
	"$B/dxl" cluster status --dir "$dir" || true

	if [ "${DXL_MAIN_NO_KILL:-0}" != 1 ]; then
		say "5. replica $victim restarts on its data directory, catches up and rejoins"
		"$B/dxl" cluster restart "$victim" --dir "$dir"
		if wait_rejoined "$victim" "$SHARDS"; then
			cat "$dir/status"
		else
			echo "replica $victim has not rejoined every shard within 20 s:"
			cat "$dir/status"
		fi
	fi

	say "6. the checker: every account read back"
	local verdict
	"$SB" check --dir "$dir" --ledger "$dir/ledger.json" > "$dir/check.txt" 2>>"$dir/run.log" || true
	verdict=$(grep '^checker:' "$dir/check.txt" || true)
	echo "${verdict:-checker: FAILED: the check did not run (see $dir/run.log)}"

	say "7. shutting down"
	"$B/dxl" cluster down --dir "$dir"
	case "$verdict" in
	"checker: OK"*) return 0 ;;
	*) keep=1; return 1 ;;
	esac
}

# ---- scripts/run.sh --log: the replicated log through a failover ----------------------

log_demo() {
	say "1. a local cluster: ZooKeeper + 3 replicas, 2 shards, 3-way replication"
	"$B/dxl" cluster up --dir "$dir" --replicas 3 --shards 2 --ring-size 4M \
		--writer-slots 4 --session-timeout 2000 || return 1
	"$B/dxl" cluster status --dir "$dir"

	RATE=${DXL_MAIN_RATE:-1000} DUR=${DXL_MAIN_SECONDS:-16} KILL_AT=${DXL_MAIN_KILL_AT:-6}
	say "2. $RATE appends/s for $DUR s over both shards; replica 1 (primary) is killed at ${KILL_AT} s"
	"$B/dxl" log load --dir "$dir" --rate "$RATE" --duration "$DUR" \
		--acked "$dir/acked.tsv" --json results/main-load.json &
	load=$!
	sleep "$KILL_AT"
	echo "--- $(date +%T.%3N) dxl cluster kill 1 --signal KILL"
	"$B/dxl" cluster kill 1 --dir "$dir"
	wait "$load" || { echo "the load failed (see above)"; return 1; }

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
		"$B/dxl" tail --dir "$dir" --shard "$s" --from earliest > "$dir/tail-$s.tsv" || ok=0
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
		|| { echo "verdict: FAILED"; return 1; }

	say "5. replica 1 restarts on its data directory, catches up and rejoins"
	"$B/dxl" cluster restart 1 --dir "$dir"
	wait_rejoined 1 2 || true
	cat "$dir/status"
	echo "a last append after the rejoin:"
	echo "after the rejoin" | "$B/dxl" log append --dir "$dir" --shard 0

	say "6. shutting down"
	"$B/dxl" cluster down --dir "$dir"
}

status=0
if [ "$demo" = log ]; then
	log_demo || status=1
	results="results/main-load.json"
else
	smallbank_demo || status=1
	results="results/main-smallbank.json"
fi

if [ "$bench" = 1 ]; then
	say "8. fabric: two processes on loopback, tcp provider"
	"$B/dxl-bench-fabric" $mode --out results/fabric.json || status=1
	say "9. replicated log: replica processes and a writer, against ZooKeeper"
	"$B/dxl-bench-log" $mode --out results/log.json || status=1
	say "10. SmallBank: hybrid, one-sided, two-sided at several coroutine counts, and etcd"
	scripts/bench-smallbank.sh --no-build $mode --out results/smallbank.json || status=1
	results="$results results/fabric.json results/log.json results/smallbank.json results/smallbank.md"
fi
echo
if [ "$status" = 0 ]; then
	echo "Done. Results: $results"
else
	echo "FAILED (see above). Results: $results"
fi
exit "$status"
