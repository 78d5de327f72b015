#!/usr/bin/env bash
# side-dxl-smallbank.sh -- the dxl side of a SmallBank comparison for
# dxl-bench-compare (docs/benchmarks.md). One script, called for every phase
# ($DXLB_PHASE):
#   setup     'dxl cluster up' (REPLICAS replicas, SHARDS shards, DURABILITY,
#             PROVIDER, NIC-owned lock words) in $DXLB_STATE/cluster, load
#             ACCOUNTS accounts; writes $DXLB_STATE/config.json (the cluster's
#             own cluster.json), datadirs and pids
#   warmup|rep  'dxl-bench-smallbank run' for $DXLB_SECONDS s, MODE, THREADS x
#             COROUTINES in flight, result to $DXLB_OUT; then 'check' on the
#             run's ledger: a run whose money check fails exits 1 (its
#             numbers are not used)
#   teardown  'dxl cluster down'
# Environment (the spec's env or the cell's): DXL_BIN [build/bin], ACCOUNTS
# [20000], SHARDS [3], REPLICAS [3], DURABILITY [msync], PROVIDER [tcp],
# MODE [hybrid], THREADS [1], COROUTINES [8]; REPLICA_OPTS: more replica
# options for 'dxl cluster up', space-separated key=value (e.g.
# recovery.checkpoint_ms=1); OFFERED: an offered rate
# (transactions/s, open loop: latency from each one's intended start; the
# coroutines then cap what is in flight).
set -euo pipefail
B=${DXL_BIN:-build/bin}
B=$(cd "$B" && pwd)
d=$DXLB_STATE/cluster
accounts=${ACCOUNTS:-20000} shards=${SHARDS:-3} replicas=${REPLICAS:-3}
durability=${DURABILITY:-msync} provider=${PROVIDER:-tcp}
case "$DXLB_PHASE" in
setup)
	cap=$(( accounts * 13 / 10 / shards + 1000 ))
	"$B/dxl" cluster up --dir "$d" --replicas "$replicas" --shards "$shards" \
		--provider "$provider" --durability "$durability" --ring-size 16M \
		--writer-slots 16 --session-timeout 2000 \
		-o "engine.tables=1:8:$cap,2:8:$cap" -o engine.lock_mode=nic \
		$(for o in ${REPLICA_OPTS:-}; do printf -- '-o %s ' "$o"; done)
	"$B/dxl-bench-smallbank" load --dir "$d" --accounts "$accounts" --threads 1 --coroutines 16
	python3 - "$d/cluster.json" "$DXLB_STATE" <<'PY'
import json, os, sys
cj, state = sys.argv[1:]
c = json.load(open(cj))
# the build of the binaries is in every run's own setup block ("build")
out = {"system": "dxl", "cluster_json": c, "lock_mode": "nic"}
json.dump(out, open(os.path.join(state, "config.json"), "w"), indent=1)
pids = [str(r.get("pid")) for r in c.get("replicas", []) if isinstance(r, dict) and r.get("pid")]
open(os.path.join(state, "pids"), "w").write("".join(p + "\n" for p in pids))
PY
	echo "$d/data" > "$DXLB_STATE/datadirs"
	;;
warmup|rep)
	ledger=$DXLB_STATE/ledger-$DXLB_CELL-$DXLB_PHASE-$DXLB_REP.json
	"$B/dxl-bench-smallbank" run --dir "$d" --mode "${MODE:-hybrid}" \
		--threads "${THREADS:-1}" --coroutines "${COROUTINES:-8}" \
		--duration "$DXLB_SECONDS" --warmup 0 ${OFFERED:+--rate "$OFFERED"} \
		--json "$DXLB_OUT" --ledger "$ledger"
	v=$("$B/dxl-bench-smallbank" check --dir "$d" --ledger "$ledger" 2>&1 | grep '^checker:' || true)
	echo "${v:-checker: FAILED: no verdict}"
	rm -f "$ledger"
	case "$v" in "checker: OK"*) ;; *) exit 1 ;; esac
	;;
teardown)
	[ -f "$d/cluster.json" ] && "$B/dxl" cluster down --dir "$d"
	;;
esac
