#!/usr/bin/env bash
# bench-recovery.sh -- the numbers of docs/recovery.md: rebuild, open and
# checkpoint cost in one process (dxl-bench-recovery), and a node joining a
# loaded shard while SmallBank runs on it (time to join, throughput during).
#
# Usage: scripts/bench-recovery.sh [--bin DIR] [--records LIST] [--accounts N]
#                                  [--duration S] [--add-at S] [--quick]
#                                  [--out FILE]
#   --bin DIR        the binaries (default build/bin)
#   --records LIST   dxl-bench-recovery --records (default 1000000,10000000)
#   --accounts N     SmallBank accounts of the join run: 2 records each, one
#                    shard (default 500000 = 1 M records)
#   --duration S     SmallBank run (default 60)
#   --add-at S       seconds into the run when the node is added (default 15)
#   --quick          --records 200000 --accounts 20000 --duration 20 --add-at 6
#   --out FILE       results (default results/recovery.json; the plot of the
#                    join next to it, .svg: scripts/plot-recovery.py)
#
# The join: 'dxl cluster up' with 3 replicas and 1 shard (rings 16M x 16,
# retention 5 s: the members reclaim their log), SmallBank loaded, node 3
# killed for good (the shard runs on 2 of cm.replication 3), then SmallBank
# runs (2 threads x 8 coroutines) and at --add-at 'dxl cluster add' starts
# node 4: it finds the members' logs past its empty store, transfers their
# tables with one-sided READs while the transactions go on, applies the
# log, says synced, the CM adds it. Afterwards the SmallBank checker and
# 'dxl cluster verify' must pass. Measured: add -> member (s), the
# transfer's own times (from node 4's log), SmallBank txn/s before and
# while it joins, the longest time without a commit, and the hand-over:
# from the configuration that adds node 4 to its registration for it
# (writers wait for that; node 4's log).
#
# --ckpt-cost [--ckpt-accounts LIST] [--ckpt-every MS] [--duration S]
#   instead: what members' checkpoints cost the shard's transactions. For
#   each accounts count of LIST (default 100000,500000): 3 replicas, 1 shard
#   (as above, retention 60 s), recovery.checkpoint_ms=MS (default 10000:
#   every member writes a fuzzy checkpoint of its store MS after the end of
#   its last one), SmallBank loaded and run for --duration (default 60) s.
#   From the members' logs (event=checkpoint_done: entries, write_ms) each second
#   of SmallBank's timeline is put with the seconds during which some
#   member was writing a checkpoint, or with those when none was: txn/s of
#   each, and their ratio. Also per checkpoint: ms, entries, MB/s, the
#   file's size and the disk it takes (du), and the load average (1 min)
#   before and after. Results: --out (default results/recovery-ckpt.json).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/build/bin
records=1000000,10000000
accounts=500000
duration=60
add_at=15
out=
ckpt_cost=
ckpt_accounts=100000,500000
ckpt_every=10000
while [ $# -gt 0 ]; do
	case $1 in
	--bin) bin=$2; shift 2 ;;
	--records) records=$2; shift 2 ;;
	--accounts) accounts=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--add-at) add_at=$2; shift 2 ;;
	--quick) records=200000; accounts=20000; duration=20; add_at=6; shift ;;
	--out) out=$2; shift 2 ;;
	--ckpt-cost) ckpt_cost=1; shift ;;
	--ckpt-accounts) ckpt_accounts=$2; shift 2 ;;
	--ckpt-every) ckpt_every=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-recovery: unknown option $1" >&2; exit 2 ;;
	esac
done
work=$(mktemp -d /tmp/dxl-bench-recovery.XXXXXX)
dir=$work/cluster
cleanup() {
	"$bin/dxl" cluster down --dir "$dir" >/dev/null 2>&1 || true
	[ -n "${keep:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

if [ -n "$ckpt_cost" ]; then
	out=${out:-results/recovery-ckpt.json}
	mkdir -p "$(dirname "$out")"
	runs=()
	for acc in ${ckpt_accounts//,/ }; do
		echo "=== checkpoint cost: $acc accounts (2 records each), 1 shard, a checkpoint every ${ckpt_every} ms"
		cdir=$work/ckpt-$acc
		cap=$(( acc * 13 / 10 + 64 ))
		load0=$(cut -d' ' -f1 /proc/loadavg)
		dir=$cdir  # for cleanup
		"$bin/dxl" cluster up --dir "$cdir" --replicas 3 --shards 1 --ring-size 16M \
			--writer-slots 16 --session-timeout 2000 \
			-o "engine.tables=1:8:$cap,2:8:$cap" -o engine.lock_mode=nic \
			-o log.retention_ms=60000 -o "recovery.checkpoint_ms=$ckpt_every" >/dev/null
		"$bin/dxl-bench-smallbank" load --dir "$cdir" --accounts "$acc" --threads 2 \
			--coroutines 8 --batch 32 | tail -1
		"$bin/dxl-bench-smallbank" run --dir "$cdir" --duration "$duration" --threads 2 \
			--coroutines 8 --progress --json "$cdir/run.json" > "$cdir/progress.txt" &
		runpid=$!
		for _ in $(seq 1 6000); do
			if grep -qE '^ +[0-9]+\.[0-9] ' "$cdir/progress.txt" 2>/dev/null; then break; fi
			sleep 0.1
		done
		t_run0=$(python3 -c "import time; print(time.time() - 1.0)")
		wait $runpid
		load1=$(cut -d' ' -f1 /proc/loadavg)
		# the newest checkpoint each member keeps: size and disk use
		for n in 1 2 3; do
			f=$(ls "$cdir"/data/$n/ckpt-0-*.dat 2>/dev/null | tail -1)
			[ -n "$f" ] && echo "$n $(stat -c %s "$f") $(du -k "$f" | cut -f1)"
		done > "$cdir/ckpt-files.txt"
		"$bin/dxl" cluster down --dir "$cdir" >/dev/null 2>&1 || true
		python3 - "$cdir" "$t_run0" "$acc" "$ckpt_every" "$load0" "$load1" > "$cdir/result.json" <<'EOF2'
import json, re, sys, datetime
cdir, t_run0, acc, every, load0, load1 = sys.argv[1:7]
t_run0 = float(t_run0)
run = json.load(open(cdir + "/run.json"))
def ts(line):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp() if m else None
ckpts = []
for n in (1, 2, 3):
    try:
        lines = open("%s/logs/replica-%d.log" % (cdir, n)).read().splitlines()
    except OSError:
        continue
    for l in lines:
        if "event=checkpoint_done" not in l:
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", l))
        end = ts(l) - t_run0
        # write_ms: the write itself; ms also counts until the service
        # loop saw it end (up to log.retention_check_ms later)
        ms = float(kv.get("write_ms", kv.get("ms", 0)))
        ckpts.append({"node": n, "start_s": round(end - ms / 1000, 2), "end_s": round(end, 2),
                      "ms": ms, "entries": int(kv.get("entries", 0))})
files = {}
for l in open(cdir + "/ckpt-files.txt").read().splitlines():
    n, size, kb = l.split()
    files[int(n)] = {"bytes": int(size), "disk_bytes": int(kb) * 1024}
tl = [p for p in run.get("timeline", []) if p["t_s"] >= 2]
def busy(t):  # the second (t-1, t] overlaps a checkpoint
    return any(c["start_s"] < t and c["end_s"] > t - 1 for c in ckpts)
during = [p["txn_per_s"] for p in tl if busy(p["t_s"])]
without = [p["txn_per_s"] for p in tl if not busy(p["t_s"])]
avg = lambda xs: round(sum(xs) / len(xs), 1) if xs else None
inrun = [c for c in ckpts if c["end_s"] > 0 and c["start_s"] < run.get("duration_s", 1e9)]
res = {
    "accounts": int(acc), "records": 2 * int(acc), "checkpoint_ms": int(every),
    "load_avg_1m_before": float(load0), "load_avg_1m_after": float(load1),
    "checkpoints": ckpts, "checkpoints_in_run": len(inrun),
    "checkpoint_ms_mean": avg([c["ms"] for c in inrun]),
    "checkpoint_mb_per_s_mean": avg([c["entries"] * (32 + 8) / 1e6 / (c["ms"] / 1000)
                                      for c in inrun if c["ms"] > 0]),
    "files": files,
    "seconds_during": len(during), "seconds_without": len(without),
    "txn_per_s_during": avg(during), "txn_per_s_without": avg(without),
    "ratio": round(avg(during) / avg(without), 3) if during and without else None,
    "smallbank": {k: run.get(k) for k in ("txn_per_s", "p50_us", "p99_us", "committed", "maybe")},
}
json.dump(res, sys.stdout, indent=2)
EOF2
		python3 -c "
import json,sys; r=json.load(open('$cdir/result.json'))
print('N=%d records: %d checkpoints in the run, %s ms each (%s MB/s of entries), file %s; txn/s during %s (%d s) / without %s (%d s) = %s; load %s -> %s' % (
  r['records'], r['checkpoints_in_run'], r['checkpoint_ms_mean'], r['checkpoint_mb_per_s_mean'],
  r['files'], r['txn_per_s_during'], r['seconds_during'], r['txn_per_s_without'], r['seconds_without'],
  r['ratio'], r['load_avg_1m_before'], r['load_avg_1m_after']))"
		cp "$cdir/result.json" "$work/ckpt-$acc.json"
		runs+=("$work/ckpt-$acc.json")
	done
	python3 - "$out" "${runs[@]}" <<'EOF2'
import json, sys, os
out = sys.argv[1]
res = {"benchmark": "recovery-checkpoint-cost", "cores": os.cpu_count(),
       "runs": [json.load(open(f)) for f in sys.argv[2:]]}
json.dump(res, open(out, "w"), indent=2)
print("wrote", out)
EOF2
	exit 0
fi
out=${out:-results/recovery.json}
mkdir -p "$(dirname "$out")"

echo "=== in-process: dxl-bench-recovery --records $records"
"$bin/dxl-bench-recovery" --records "$records" --out "$work/inproc.json"

echo "=== join: $accounts accounts (2 records each), 1 shard"
cap=$(( accounts * 13 / 10 + 64 ))
"$bin/dxl" cluster up --dir "$dir" --replicas 3 --shards 1 --ring-size 16M \
	--writer-slots 16 --session-timeout 2000 \
	-o "engine.tables=1:8:$cap,2:8:$cap" -o engine.lock_mode=nic \
	-o log.retention_ms=5000 -o log.retention_check_ms=200 >/dev/null
"$bin/dxl-bench-smallbank" load --dir "$dir" --accounts "$accounts" --threads 2 \
	--coroutines 8 --batch 32 | tail -1
"$bin/dxl" cluster kill 3 --dir "$dir" >/dev/null
# node 3's session expires (2 s) and the CM removes it; retention (5 s)
# passes what was loaded
sleep 8
"$bin/dxl-bench-smallbank" run --dir "$dir" --duration "$duration" --threads 2 --coroutines 8 \
	--progress --json "$work/run.json" --ledger "$work/ledger.json" > "$work/progress.txt" &
runpid=$!
# the run reads every account first; its clock starts with the first
# progress line (t_s 1.0)
for _ in $(seq 1 6000); do
	if grep -qE '^ +[0-9]+\.[0-9] ' "$work/progress.txt" 2>/dev/null; then break; fi
	sleep 0.1
done
t_run0=$(python3 -c "import time; print(time.time() - 1.0)")
sleep "$(python3 -c "print(max(0.0, $add_at - 1.0))")"
t_add=$(date +%s.%N)
"$bin/dxl" cluster add --dir "$dir" >/dev/null
t_member=
for _ in $(seq 1 1200); do
	if grep -q "event=shard_state shard=0 .*state=member" "$dir/logs/replica-4.log" 2>/dev/null; then
		t_member=$(date +%s.%N)
		break
	fi
	sleep 0.1
done
wait $runpid
"$bin/dxl-bench-smallbank" check --dir "$dir" --ledger "$work/ledger.json" | tee "$work/check.txt"
"$bin/dxl" cluster verify --dir "$dir" --wait 30 | tee "$work/verify.txt"
cp "$dir/logs/replica-4.log" "$work/replica-4.log"
"$bin/dxl" cluster down --dir "$dir" >/dev/null 2>&1 || true

python3 - "$work" "$out" "$t_add" "${t_member:-0}" "$t_run0" "$accounts" <<'EOF'
import json, re, sys, datetime
work, out, t_add, t_member, t_run0, accounts = sys.argv[1:7]
t_add, t_member, t_run0 = float(t_add), float(t_member), float(t_run0)
add_at = t_add - t_run0  # seconds into the run's timeline
inproc = json.load(open(work + "/inproc.json"))
run = json.load(open(work + "/run.json"))
log = open(work + "/replica-4.log").read().splitlines()
def ts(line):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()
def kv(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))
xfer = [kv(l) for l in log if "event=transfer_done" in l]
member = [l for l in log if "event=shard_state shard=0" in l and "state=member" in l]
handover = None
if member:
    t_cfg = ts(member[0])
    epoch = kv(member[0]).get("epoch")
    reg = [l for l in log if "event=registered" in l and ts(l) and ts(l) >= t_cfg]
    jp = [l for l in log if "event=join_pull shard=0" in l]
    if reg:
        handover = {"config_applied_to_registered_ms": round((ts(reg[0]) - t_cfg) * 1000, 1),
                    "join_pull_ms": round((ts(jp[0]) - t_cfg) * 1000, 1) if jp else None,
                    "epoch": epoch}
tl = run.get("timeline", [])
def rate(a, b):
    xs = [p["txn_per_s"] for p in tl if a <= p["t_s"] < b]
    return sum(xs) / len(xs) if xs else None
join_s = t_member - t_add if t_member else None
end_join = add_at + (join_s or 0) + 1
res = {
    "inprocess": inproc,
    "join": {
        "accounts": int(accounts), "records": 2 * int(accounts), "shards": 1,
        "add_at_s": round(add_at, 2), "add_to_member_s": round(join_s, 2) if join_s else None,
        "transfers": xfer,
        "handover": handover,
        "txn_per_s_before": rate(2, add_at),
        "txn_per_s_while_joining": rate(add_at, end_join),
        "txn_per_s_after": rate(end_join + 1, 1e9),
        "max_gap_s": run.get("max_gap_s"), "max_gap_from_s": run.get("max_gap_from_s"),
        "check": open(work + "/check.txt").read().strip().splitlines()[-1],
        "verify": open(work + "/verify.txt").read().strip(),
        "smallbank": {k: run.get(k) for k in ("txn_per_s", "p50_us", "p99_us", "committed", "maybe")},
        "member_at_s": round(add_at + join_s, 2) if join_s else None,
        "timeline": [{"t_s": p["t_s"], "txn_per_s": p["txn_per_s"]} for p in tl],
    },
    "loadavg": open("/proc/loadavg").read().split()[:3],
}
json.dump(res, open(out, "w"), indent=2)
j = res["join"]
print("join: add -> member %s s; before %s txn/s, while joining %s txn/s, after %s; max gap %s s; hand-over %s" % (
    j["add_to_member_s"], j["txn_per_s_before"], j["txn_per_s_while_joining"], j["txn_per_s_after"],
    j["max_gap_s"], j["handover"]))
print("wrote", out)
EOF
# the plot of docs/recovery.md: txn/s over the join, next to the results
python3 "$(dirname "$0")/plot-recovery.py" "$out" "${out%.json}.svg"
