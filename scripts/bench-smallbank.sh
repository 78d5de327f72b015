#!/usr/bin/env bash
# bench-smallbank.sh -- SmallBank on dxl in its three transaction modes, and
# on etcd (the peer), in one run; every dxl run is checked.
#
# A survey (one short run per point, fixed order), not a comparison: the
# published dxl / etcd comparison is bench/specs/smallbank-etcd.json, run by
# dxl-bench-compare (make bench-report, docs/benchmarks.md).
#
#   1. build (unless --no-build or --bin)
#   2. a cluster with NIC-owned lock words (engine.lock_mode=nic): 3 replicas,
#      SHARDS shards, 3-way replication, its own ZooKeeper; load ACCOUNTS
#      accounts; for each mode of hybrid, onesided and each coroutine count:
#      'dxl-bench-smallbank run' for DURATION s, then 'check' on its ledger
#   3. the same on a cluster with CPU-owned lock words (lock_mode=cpu) for the
#      two-sided mode
#   4. etcd (if scripts/etcd.sh and dxl-bench-smallbank-etcd are there): a
#      3-member cluster on loopback, the same accounts, THREADS x C sessions
#      for each coroutine count C (each session one transaction in flight, as
#      each dxl coroutine)
#   5. FILE (results/smallbank.json): every run's result and check verdict;
#      FILE.md: a table (mode, coroutines, txn/s, abort rate, p50, p99) and
#      the dxl-hybrid / etcd ratios of throughput and p50 per session count
#
# Usage: scripts/bench-smallbank.sh [options]
#   --accounts N        accounts [20000; quick 10000]
#   --duration S        seconds per run [5; quick 3]
#   --coroutines LIST   coroutines per thread [1,2,4,8,16; quick 1,4,16]
#   --threads T         worker threads of the load and of every run [1] (2
#                       cores are shared with 3 replica processes and
#                       ZooKeeper: 1 or 2)
#   --modes LIST        dxl modes [hybrid,onesided,twosided]
#   --shards S          shards [3]
#   --durability MODE   dxl's durability: msync [default: durable, like etcd's
#                       fsync], pmem, or process (page cache only: NOT
#                       durable, labelled so in the table)
#   --no-etcd           skip the etcd peer
#   --out FILE          result JSON [results/smallbank.json]; the table goes
#                       to FILE without .json plus .md
#   --quick             a small configuration (about 2 minutes)
#   --keep              keep the work directory (cluster logs, ledgers)
#   --work DIR          work directory [a new /tmp/dxl-bench-smallbank.*]
#   --bin DIR           where dxl, dxl-replica, dxl-bench-smallbank[-etcd]
#                       are [build/bin]; implies --no-build
#   --no-build          do not run make
# Exit status: 0 every run finished and every check passed; 1 otherwise
# (the work directory is kept then).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
accounts= duration= corolist= threads=1 modes=hybrid,onesided,twosided shards=3
etcd=1 out=results/smallbank.json quick=0 keep=0 work= bin= build=1 durability=msync
usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
	case "$1" in
	--accounts) accounts=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--coroutines) corolist=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--shards) shards=$2; shift 2 ;;
	--durability) durability=$2; shift 2 ;;
	--no-etcd) etcd=0; shift ;;
	--out) out=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	--keep) keep=1; shift ;;
	--work) work=$2; shift 2 ;;
	--bin) bin=$2; build=0; shift 2 ;;
	--no-build) build=0; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "bench-smallbank.sh: unknown option $1 (--help)" >&2; exit 2 ;;
	esac
done
if [ "$quick" = 1 ]; then
	accounts=${accounts:-10000} duration=${duration:-3} corolist=${corolist:-1,4,16}
else
	accounts=${accounts:-20000} duration=${duration:-5} corolist=${corolist:-1,2,4,8,16}
fi
case "$durability" in msync|pmem|process) ;; *) echo "bench-smallbank.sh: --durability msync|pmem|process" >&2; exit 2 ;; esac
IFS=, read -r -a coros <<< "$corolist"
IFS=, read -r -a modelist <<< "$modes"

cd "$here"
if [ "$build" = 1 ]; then
	make -j"${JOBS:-$(nproc)}" build/bin/dxl build/bin/dxl-replica \
		build/bin/dxl-bench-smallbank build/bin/dxl-bench-smallbank-etcd >/dev/null ||
		{ echo "bench-smallbank.sh: the build failed" >&2; exit 1; }
fi
B=${bin:-${DXL_BUILD:-build}/bin}
B=$(cd "$B" && pwd)
SB=$B/dxl-bench-smallbank
[ -x "$SB" ] || { echo "bench-smallbank.sh: $SB missing (make)" >&2; exit 1; }
work=${work:-$(mktemp -d /tmp/dxl-bench-smallbank.XXXXXX)}
mkdir -p "$work" "$(dirname "$out")"
failed=0
current_cluster=
cleanup() {
	[ -n "$current_cluster" ] && "$B/dxl" cluster down --dir "$current_cluster" >/dev/null 2>&1
	[ -d "$work/etcd" ] && "$here/scripts/etcd.sh" stop "$work/etcd" >/dev/null 2>&1
	if [ "$keep" = 1 ] || [ "$failed" != 0 ]; then
		echo "bench-smallbank.sh: work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n=== %s\n' "$*"; }
# every record slot of a table: 1.3 x the accounts of a shard, and some
cap=$(( accounts * 13 / 10 / shards + 1000 ))

cluster_up() { # DIR LOCKMODE
	"$B/dxl" cluster up --dir "$1" --replicas 3 --shards "$shards" --ring-size 16M \
		--durability "$durability" \
		--writer-slots 16 --session-timeout 2000 \
		-o "engine.tables=1:8:$cap,2:8:$cap" -o "engine.lock_mode=$2" >"$1.up.log" 2>&1 ||
		{ echo "bench-smallbank.sh: cluster up failed:"; cat "$1.up.log"; return 1; }
	current_cluster=$1
}

cluster_down() {
	"$B/dxl" cluster down --dir "$current_cluster" >/dev/null 2>&1
	current_cluster=
}

# one run and its check: the run's JSON + {"check": verdict, "check_ok": bool}
run_one() { # DIR MODE COROUTINES
	local d=$1 m=$2 c=$3 tag="$2-c$3"
	echo "--- $m, $threads threads x $c coroutines, $duration s (after 1 s of warm-up)"
	if ! timeout --kill-after=10 $((duration * 3 + 120)) "$SB" run --dir "$d" --mode "$m" \
		--threads "$threads" --coroutines "$c" --duration "$duration" --warmup 1 \
		--json "$work/run-$tag.json" --ledger "$work/ledger-$tag.json"; then
		echo "bench-smallbank.sh: run $tag failed"
		failed=1
		return
	fi
	local verdict
	timeout 120 "$SB" check --dir "$d" --ledger "$work/ledger-$tag.json" \
		> "$work/check-$tag.txt" 2>&1
	verdict=$(grep '^checker:' "$work/check-$tag.txt")
	verdict=${verdict:-"checker: FAILED: check did not finish"}
	echo "$verdict"
	case "$verdict" in "checker: OK"*) ok=true ;; *) ok=false; failed=1 ;; esac
	python3 - "$work/run-$tag.json" "$verdict" "$ok" <<'PY'
import json, sys
p = sys.argv[1]
r = json.load(open(p))
r["check"] = sys.argv[2]
r["check_ok"] = sys.argv[3] == "true"
r.pop("timeline", None)
json.dump(r, open(p, "w"), indent=1)
PY
}

nic=() cpu=()
for m in "${modelist[@]}"; do
	case "$m" in
	hybrid|onesided) nic+=("$m") ;;
	twosided) cpu+=("$m") ;;
	*) echo "bench-smallbank.sh: unknown mode $m" >&2; exit 2 ;;
	esac
done

for lm in nic cpu; do
	if [ "$lm" = nic ]; then ms=("${nic[@]}"); else ms=("${cpu[@]}"); fi
	[ ${#ms[@]} = 0 ] && continue
	d=$work/cluster-$lm
	say "a cluster with $lm-owned lock words: 3 replicas, $shards shards, $accounts accounts (${ms[*]})"
	cluster_up "$d" "$lm" || { failed=1; continue; }
	if ! "$SB" load --dir "$d" --accounts "$accounts" --threads "$threads" --coroutines 16 \
		$([ "$lm" = cpu ] && echo --mode twosided); then
		failed=1
		cluster_down
		continue
	fi
	for m in "${ms[@]}"; do
		for c in "${coros[@]}"; do
			run_one "$d" "$m" "$c"
		done
	done
	cluster_down
done

etcd_runs=0
if [ "$etcd" = 1 ]; then
	if [ ! -x "$here/scripts/etcd.sh" ] || [ ! -x "$B/dxl-bench-smallbank-etcd" ]; then
		say "etcd: skipped (scripts/etcd.sh or dxl-bench-smallbank-etcd missing)"
	elif ! E=$("$here/scripts/etcd.sh" start "$work/etcd" 2>"$work/etcd-start.log"); then
		say "etcd: skipped (scripts/etcd.sh start failed; $work/etcd-start.log)"
		cat "$work/etcd-start.log"
	else
		say "etcd 3 members ($E), $accounts accounts, $threads threads x C sessions"
		load=
		for c in "${coros[@]}"; do
			echo "--- etcd, $threads threads x $c sessions, $duration s"
			if timeout --kill-after=10 $((duration * 3 + 300)) "$B/dxl-bench-smallbank-etcd" \
				--endpoints "$E" --accounts "$accounts" --duration "$duration" \
				--threads "$threads" --sessions "$c" $load \
				--json "$work/etcd-c$c.json"; then
				etcd_runs=$((etcd_runs + 1))
				load=--no-load
			else
				echo "bench-smallbank.sh: etcd run c=$c failed"
				failed=1
			fi
		done
		"$here/scripts/etcd.sh" stop "$work/etcd" >/dev/null 2>&1
	fi
fi

say "results: $out, ${out%.json}.md"
python3 - "$work" "$out" "${out%.json}.md" "$SB" "$accounts" "$duration" "$threads" "$shards" "$durability" <<'PY'
import glob, json, os, platform, subprocess, sys, time
work, out, md, sb, accounts, duration, threads, shards, durability = sys.argv[1:]
runs = []
for p in sorted(glob.glob(os.path.join(work, "run-*.json"))):
    runs.append(json.load(open(p)))
etcd = []
for p in sorted(glob.glob(os.path.join(work, "etcd-c*.json"))):
    e = json.load(open(p))
    e.pop("timeline", None)
    etcd.append(e)
order = {"hybrid": 0, "onesided": 1, "twosided": 2}
runs.sort(key=lambda r: (order.get(r["mode"], 9), r["coroutines"]))
etcd.sort(key=lambda e: e.get("sessions", 0))
def sess(r):
    return r["threads"] * r["coroutines"]
ratios = []
for e in etcd:
    n = e.get("sessions_total", e.get("threads", 0) * e.get("sessions", 0))
    for r in runs:
        if r["mode"] == "hybrid" and sess(r) == n and e.get("txn_per_s") and e.get("p50_us"):
            ratios.append({"sessions_total": n,
                           "txn_per_s_ratio": r["txn_per_s"] / e["txn_per_s"],
                           "p50_ratio": r["p50_us"] / e["p50_us"],
                           "dxl_txn_per_s": r["txn_per_s"], "etcd_txn_per_s": e["txn_per_s"],
                           "dxl_p50_us": r["p50_us"], "etcd_p50_us": e["p50_us"]})
try:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
except Exception:
    rev = ""
doc = {"benchmark": "smallbank",
       "config": {"accounts": int(accounts), "duration_s": float(duration),
                  "threads": int(threads), "shards": int(shards), "replicas": 3,
                  "fabric": "tcp (loopback)", "durability": durability,
                  "cpus": os.cpu_count(),
                  "kernel": platform.release(), "git": rev,
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
       "runs": runs, "etcd": etcd, "ratios": ratios,
       "checks_ok": all(r.get("check_ok") for r in runs)}
json.dump(doc, open(out, "w"), indent=1)
L = []
L.append("# SmallBank on dxl (and etcd)\n")
L.append("A survey (one %s-s run per point, fixed order), not a comparison under the method "
         "of docs/benchmarks.md. dxl durability: **%s**%s.\n"
         % (duration, durability, " (page cache only: NOT durable; etcd fsyncs every commit, "
            "so these ratios are not like for like)" if durability == "process" else ""))
L.append("%s accounts (hot set 4%% drawing 90%% of the accesses), %s shards x 3 replicas "
         "on one machine (%s cpus, tcp over loopback), %s worker thread%s, %s s per run; "
         "git %s, %s. Written by scripts/bench-smallbank.sh.\n"
         % (accounts, shards, os.cpu_count(), threads, "" if threads == "1" else "s",
            duration, rev, doc["config"]["date"]))
L.append("| system | mode | threads x coroutines | txn/s | abort rate | p50 us | p99 us | check |")
L.append("|---|---|---|---:|---:|---:|---:|---|")
for r in runs:
    L.append("| dxl | %s | %d x %d | %.0f | %.2f%% | %.0f | %.0f | %s |"
             % (r["mode"], r["threads"], r["coroutines"], r["txn_per_s"],
                100 * r["abort_rate"], r["p50_us"], r["p99_us"],
                "OK" if r.get("check_ok") else "FAILED"))
for e in etcd:
    L.append("| etcd | 3 members | %d x %d | %.0f | %.2f%% | %.0f | %.0f | %s |"
             % (e.get("threads", 0), e.get("sessions", 0), e.get("txn_per_s", 0),
                100 * e.get("abort_rate", 0), e.get("p50_us", 0), e.get("p99_us", 0),
                "money " + str(e.get("check", "?"))))
if ratios:
    L.append("\ndxl hybrid / etcd at the same number of transactions in flight:\n")
    L.append("| in flight | dxl txn/s | etcd txn/s | throughput dxl/etcd | dxl p50 us | etcd p50 us | p50 dxl/etcd |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|")
    for q in ratios:
        L.append("| %d | %.0f | %.0f | %.1fx | %.0f | %.0f | %.2f |"
                 % (q["sessions_total"], q["dxl_txn_per_s"], q["etcd_txn_per_s"],
                    q["txn_per_s_ratio"], q["dxl_p50_us"], q["etcd_p50_us"], q["p50_ratio"]))
bad = [r for r in runs if not r.get("check_ok")]
L.append("\nChecks: %s.\n" % ("every dxl run passed the checker (money conserved, every "
                               "acknowledged commit in the versions)" if not bad else
                               "%d FAILED: %s" % (len(bad), "; ".join(
                                   "%s c=%d: %s" % (r["mode"], r["coroutines"], r["check"])
                                   for r in bad))))
open(md, "w").write("\n".join(L))
print("\n".join(L))
PY
[ $? = 0 ] || failed=1
exit $failed
