#!/usr/bin/env bash
# bench-failover.sh -- failover time distribution and tail lag of a local dxl
# cluster (docs/operations.md, "Failover and tail lag: measurements").
#
# Failover: one throw-away ZooKeeper (scripts/zk.sh) for all runs; per run a
# fresh cluster ('dxl cluster up --zk ... --cluster fo-<pid>-<T>-<driver>-<i>
# --dir WORK/...': 3 replicas, 2 shards, node 1 primary of both), a steady
# load, SIGKILL of the primary after --kill-after seconds, then the cluster
# is stopped and its directory removed. Two drivers:
#   bench  the load is dxl-bench-failover run's own writers (one
#          dxl_log_writer per shard, the same code 'dxl log load' uses): it
#          times kill -> first acknowledged append per shard exactly, the
#          gap (last ack before -> first ack after) and ZooKeeper's view
#          (registration gone, next configuration, survivors registered);
#   load   the load is 'dxl log load --rate R --json --verify'; the kill and
#          ZooKeeper's view come from 'dxl-bench-failover run --rate 0'. gap_ms
#          is load's; kill -> first ack needs load's JSON to carry
#          start_wall_ms and failovers[].end_ms (null otherwise).
# Tail lag: one cluster, 'dxl-bench-failover taillag' per window:heartbeat
# configuration at every rate of --taillag-rates.
#
# Usage: scripts/bench-failover.sh [options]
#   --runs N               failover runs per timeout and driver [20; quick 3]
#   --timeouts LIST        session timeouts, ms [1000,2000; quick 1000]
#   --driver bench|load|both                     [both; quick bench]
#   --rate N               appends/s during failover runs [1000]
#   --kill-after S         seconds of load before the kill [2]
#   --taillag-rates LIST   appends/s; 'none' skips [10,100,1000,5000; quick 100,1000]
#   --taillag-configs LIST window:heartbeat_ms pairs [256K:100,4K:100,4K:10;
#                          quick 256K:100]
#   --taillag-ms MS        per rate [5000; quick 2000]
#   --taillag-ring-size B  log.ring_size of the tail-lag cluster [16M]: with
#                          the default 1M, 5000 appends/s of 64 B fill a ring
#                          faster than retention (every 1 s) frees it and the
#                          writer waits (backpressure), which is not tail lag
#   --out FILE             summary JSON [results/failover.json]; the CSVs
#                          (with --csv) and the plot are FILE without .json
#                          plus .csv, -taillag.csv, .png
#   --csv                  write the CSVs
#   --no-plot              no plot (one is drawn if python3-matplotlib is there)
#   --quick                a small configuration (about a minute)
#   --keep                 keep the run directories (WORK)
#   --work DIR             scratch directory [a new /tmp/dxl-bench-failover.*]
#   --bin DIR              where dxl, dxl-replica, dxl-bench-failover are
#                          [$DXL_BUILD/bin or build/bin]
# Exit status: 0 all runs ok, 1 a run failed (its output is kept in WORK).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
runs= timeouts= driver= rate=1000 kill_after=2 tl_rates= tl_configs= tl_ms= tl_ring=16M
out=results/failover.json csv=0 plot=1 quick=0 keep=0 work= bin=
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) runs=$2; shift 2 ;;
	--timeouts) timeouts=$2; shift 2 ;;
	--driver) driver=$2; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--kill-after) kill_after=$2; shift 2 ;;
	--taillag-rates) tl_rates=$2; shift 2 ;;
	--taillag-configs) tl_configs=$2; shift 2 ;;
	--taillag-ms) tl_ms=$2; shift 2 ;;
	--taillag-ring-size) tl_ring=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--csv) csv=1; shift ;;
	--no-plot) plot=0; shift ;;
	--quick) quick=1; shift ;;
	--keep) keep=1; shift ;;
	--work) work=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-failover.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ "$quick" = 1 ]; then
	: "${runs:=3}" "${timeouts:=1000}" "${driver:=bench}" "${tl_rates:=100,1000}"
	: "${tl_configs:=256K:100}" "${tl_ms:=2000}"
else
	: "${runs:=20}" "${timeouts:=1000,2000}" "${driver:=both}" "${tl_rates:=10,100,1000,5000}"
	: "${tl_configs:=256K:100,4K:100,4K:10}" "${tl_ms:=5000}"
fi
case "$driver" in bench) drivers=(bench) ;; load) drivers=(load) ;; both) drivers=(bench load) ;;
*) echo "bench-failover.sh: --driver bench|load|both" >&2; exit 2 ;; esac
bin=${bin:-${DXL_BUILD:+$DXL_BUILD/bin}}
bin=${bin:-$here/build/bin}
dxl=$bin/dxl bf=$bin/dxl-bench-failover
for p in "$dxl" "$bf" "$bin/dxl-replica"; do
	[ -x "$p" ] || { echo "bench-failover.sh: $p not built (make)" >&2; exit 1; }
done
py=python3
if [ "$plot" = 1 ] && ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then
	py=/usr/bin/python3 # matplotlib may live only in the system interpreter
fi
work=${work:-$(mktemp -d /tmp/dxl-bench-failover.XXXXXX)}
mkdir -p "$work" "$(dirname "$out")"
base=${out%.json}
export DXL_SCRIPTS=$here/scripts

# clean-up, also on failure or interruption: every cluster still up, the ZooKeeper
cleanup() {
	for c in "$work"/*/cluster.json; do
		[ -f "$c" ] || continue
		"$dxl" cluster down --dir "$(dirname "$c")" >/dev/null 2>&1 || true
	done
	"$here/scripts/zk.sh" stop "$work/zk" >/dev/null 2>&1 || true
	if [ "$keep" = 0 ] && [ "${failed:-0}" = 0 ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-failover: work dir $work"
zkc=$("$here/scripts/zk.sh" start "$work/zk") || { echo "bench-failover: ZooKeeper did not start" >&2; exit 1; }
echo "bench-failover: ZooKeeper $zkc (tickTime 200 ms, scripts/zk.sh)"

failed=0
tag="fo-$$"
now_ms() { date +%s%3N; }

# up DIR NAME T [dxl cluster up options]: a fresh 3-replica, 2-shard cluster
up() {
	local d=$1 n=$2 t=$3
	shift 3
	"$dxl" cluster up --dir "$d" --zk "$zkc" --cluster "$n" --replicas 3 --shards 2 \
		--session-timeout "$t" "$@" >"$d.up" 2>&1
}
down() {
	"$dxl" cluster down --dir "$1" >/dev/null 2>&1
	if [ "$keep" = 0 ] && [ "${2:-ok}" = ok ]; then rm -rf "$1" "$1.up"; fi
}

IFS=, read -r -a tlist <<< "$timeouts"
for T in "${tlist[@]}"; do
	for drv in "${drivers[@]}"; do
		for ((i = 1; i <= runs; i++)); do
			d="$work/T$T-$drv-$i"
			rj="$work/T$T-$drv-$i.run.json"
			name="$tag-$T-$drv-$i"
			if ! up "$d" "$name" "$T"; then
				echo "run T=$T $drv $i: cluster up failed (see $d.up)"; failed=1
				down "$d" keep; continue
			fi
			ok=ok
			if [ "$drv" = bench ]; then
				"$bf" run --dir "$d" --rate "$rate" --kill-after-ms $((kill_after * 1000)) \
					--after-ms 500 --json "$rj" >"$d.out" 2>&1 || ok=fail
			else
				dur=$((kill_after + (T + 999) / 1000 + 3))
				"$dxl" log load --dir "$d" --rate "$rate" --duration "$dur" \
					--json "$work/T$T-$drv-$i.load.json" --verify >"$d.load" 2>&1 &
				lp=$!
				"$bf" run --dir "$d" --rate 0 --kill-after-ms $((kill_after * 1000)) \
					--after-ms 200 --json "$rj" >"$d.out" 2>&1 || ok=fail
				wait "$lp" || ok=fail
				cat "$d.load" >>"$d.out"
			fi
			summary=$(grep -E '^run |^  shard|^failover|^verify|^load: [0-9]' "$d.out" | tr '\n' ' ')
			echo "T=$T $drv $i/$runs: $ok: $summary"
			if [ "$ok" != ok ]; then
				failed=1
				cp "$d.out" "$work/T$T-$drv-$i.failed.out" 2>/dev/null
			fi
			down "$d" "$ok"
			rm -f "$d.out" "$d.load"
		done
	done
done

# tail lag on one cluster
tl_json=()
if [ "$tl_rates" != none ] && [ -n "$tl_rates" ]; then
	d="$work/taillag"
	if up "$d" "$tag-taillag" 2000 --ring-size "$tl_ring"; then
		IFS=, read -r -a clist <<< "$tl_configs"
		for cf in "${clist[@]}"; do
			w=${cf%%:*} hb=${cf##*:}
			j="$work/taillag-$w-$hb.json"
			echo "taillag: window $w, heartbeat $hb ms, rates $tl_rates, $tl_ms ms each, rings of $tl_ring"
			if "$bf" taillag --dir "$d" --rates "$tl_rates" --duration-ms "$tl_ms" \
				--window "$w" --heartbeat-ms "$hb" --json "$j"; then
				tl_json+=("$j")
			else
				failed=1
				[ -f "$j" ] && tl_json+=("$j")
			fi
		done
		down "$d"
	else
		echo "taillag: cluster up failed (see $d.up)"; failed=1
	fi
fi

# summary: JSON, CSVs, plot
"$py" - "$work" "$out" "$base" "$csv" "$plot" "$rate" "$kill_after" "$tl_ring" "${tl_json[@]}" <<'PY'
import glob, json, math, os, re, sys
work, out, base, want_csv, want_plot, rate, kill_after, tl_ring = sys.argv[1:9]
tl_files = sys.argv[9:]

def pct(v, p):
    """nearest-rank percentile of a list (None if empty)"""
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    k = max(0, min(len(v) - 1, math.ceil(p / 100.0 * len(v)) - 1))
    return round(v[k], 1)

def dist(v):
    v = [x for x in v if x is not None]
    return {"n": len(v), "p50": pct(v, 50), "p90": pct(v, 90), "max": round(max(v), 1) if v else None,
            "min": round(min(v), 1) if v else None}

runs, rows = [], []
for rj in sorted(glob.glob(os.path.join(work, "T*-*-*.run.json"))):
    m = re.match(r"T(\d+)-(\w+)-(\d+)\.run\.json", os.path.basename(rj))
    T, drv, i = int(m.group(1)), m.group(2), int(m.group(3))
    r = json.load(open(rj))
    r.pop("setup", None)
    r.update({"timeout_ms": T, "driver": drv, "run": i})
    if drv == "load":
        lj = rj.replace(".run.json", ".load.json")
        ld = json.load(open(lj)) if os.path.exists(lj) else {}
        r["load"] = {k: ld.get(k) for k in ("acked", "failed", "verified", "p50_ms", "p99_ms")}
        shards = []
        for f in ld.get("failovers", []):
            k2f = None
            if "end_ms" in f and "start_wall_ms" in ld and r.get("kill_wall_ms"):
                k2f = ld["start_wall_ms"] + f["end_ms"] - r["kill_wall_ms"]
            shards.append({"shard": f["shard"], "primary_from": f["primary_from"],
                           "primary_to": f["primary_to"], "gap_ms": f["gap_ms"],
                           "kill_to_first_ack_ms": k2f})
        r["shards"] = shards
        r["ok"] = bool(r.get("ok")) and ld.get("failed") == 0 and bool(ld.get("verified")) \
            and len(shards) >= 2
    runs.append(r)
    for s in r["shards"]:
        rows.append({"timeout_ms": T, "driver": drv, "run": i, "shard": s["shard"],
                     "kill_to_first_ack_ms": s.get("kill_to_first_ack_ms"),
                     "gap_ms": s.get("gap_ms"), "writer_broke_ms": s.get("broken_ms"),
                     "node_gone_ms": r.get("node_gone_ms"), "config_ms": r.get("config_ms"),
                     "registered_ms": r.get("all_registered_ms"),
                     "cm_killed": int(r.get("cm_before") == r.get("killed_node")),
                     "primary_to": s.get("primary_to"), "ok": int(bool(r.get("ok")))})

summary = []
for T in sorted({r["timeout_ms"] for r in runs}):
    for drv in ("bench", "load"):
        rs = [r for r in runs if r["timeout_ms"] == T and r["driver"] == drv]
        if not rs:
            continue
        sh = [s for r in rs for s in r["shards"]]
        cmk = [s for r in rs if r.get("cm_before") == r.get("killed_node") for s in r["shards"]]
        other = [s for r in rs if r.get("cm_before") != r.get("killed_node") for s in r["shards"]]
        summary.append({
            "timeout_ms": T, "driver": drv, "runs": len(rs),
            "runs_ok": sum(1 for r in rs if r.get("ok")),
            "runs_cm_killed": sum(1 for r in rs if r.get("cm_before") == r.get("killed_node")),
            "kill_to_first_ack_ms": dist([s.get("kill_to_first_ack_ms") for s in sh]),
            "kill_to_first_ack_ms_cm_killed": dist([s.get("kill_to_first_ack_ms") for s in cmk]),
            "kill_to_first_ack_ms_cm_alive": dist([s.get("kill_to_first_ack_ms") for s in other]),
            "gap_ms_cm_killed": dist([s.get("gap_ms") for s in cmk]),
            "gap_ms_cm_alive": dist([s.get("gap_ms") for s in other]),
            "kill_to_all_shards_ms": dist([max((s.get("kill_to_first_ack_ms") or 0) for s in r["shards"]) or None
                                           for r in rs if r["shards"]]),
            "gap_ms": dist([s.get("gap_ms") for s in sh]),
            "node_gone_ms": dist([r.get("node_gone_ms") for r in rs]),
            "config_ms": dist([r.get("config_ms") for r in rs]),
            "registered_ms": dist([r.get("all_registered_ms") for r in rs]),
        })

tl = []
for f in tl_files:
    d = json.load(open(f))
    d.pop("setup", None)
    tl.append(d)

import platform, subprocess, time
try:
    rev = subprocess.run(["git", "-C", os.environ.get("DXL_SCRIPTS", "."), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
except Exception:
    rev = ""
res = {"setup": {"kernel": " ".join(platform.uname()[i] for i in (0, 2, 4)), "cpus": os.cpu_count(),
                 "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": rev,
                 "zookeeper": "standalone, scripts/zk.sh (tickTime 200 ms)", "replicas": 3, "shards": 2,
                 "rate": int(rate), "kill_after_s": int(kill_after), "fabric": "tcp (loopback)",
                 "durability": "process", "taillag_ring_size": tl_ring},
       "failover_summary": summary, "taillag": tl, "failover_runs": runs}
# pretty, except one line per run (the file stays small enough to commit)
text = json.dumps({k: v for k, v in res.items() if k != "failover_runs"}, indent=1)
runs_text = ",\n  ".join(json.dumps(r, separators=(",", ":")) for r in runs)
with open(out, "w") as fh:
    fh.write(text[:-2] + ',\n "failover_runs": [\n  ' + runs_text + "\n ]\n}\n")
json.load(open(out))  # still valid JSON

print()
print("failover (ms from kill -9 of the primary of both shards; per shard; p50 / p90 / max):")
print("  %-7s %-6s %5s %-22s %-22s %-9s %-9s %-9s" % ("T(ms)", "driver", "runs", "kill->first ack", "gap (load's gap_ms)",
                                                    "gone p50", "cfg p50", "reg p50"))
f3 = lambda d: "%s / %s / %s" % (d["p50"], d["p90"], d["max"]) if d["n"] else "-"
for s in summary:
    print("  %-7d %-6s %2d/%-2d %-22s %-22s %-9s %-9s %-9s" % (
        s["timeout_ms"], s["driver"], s["runs_ok"], s["runs"], f3(s["kill_to_first_ack_ms"]), f3(s["gap_ms"]),
        s["node_gone_ms"]["p50"], s["config_ms"]["p50"], s["registered_ms"]["p50"]))
    k = "kill_to_first_ack_ms" if s["driver"] == "bench" else "gap_ms"
    print("  %16s CM was the victim in %d run(s): %s; CM alive: %s" % (
        "", s["runs_cm_killed"], f3(s[k + "_cm_killed"]), f3(s[k + "_cm_alive"])))
for d in tl:
    print("taillag: window %s B, heartbeat %s ms, %.3f ms per tailer poll:" % (d["window"], d["heartbeat_ms"],
                                                                       d.get("tailer_poll_ms", 0)))
    for r in d["rates"]:
        a, p = r["ack_to_deliver_ms"], r["append_to_deliver_ms"]
        print("  %6d/s: ack->deliver p50 %.2f p99 %.2f max %.2f ms; append->deliver p50 %.2f p99 %.2f ms" % (
            r["rate"], a.get("p50", -1), a.get("p99", -1), a.get("max", -1), p.get("p50", -1), p.get("p99", -1)))
print("results:", out)

if want_csv == "1":
    import csv
    with open(base + ".csv", "w", newline="") as fh:
        cols = ["timeout_ms", "driver", "run", "shard", "kill_to_first_ack_ms", "gap_ms", "writer_broke_ms",
                "node_gone_ms", "config_ms", "registered_ms", "cm_killed", "primary_to", "ok"]
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    with open(base + "-taillag.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["window", "heartbeat_ms", "rate", "records", "ack_deliver_p50_ms", "ack_deliver_p90_ms",
                    "ack_deliver_p99_ms", "ack_deliver_max_ms", "append_deliver_p50_ms", "append_deliver_p99_ms",
                    "append_ack_p50_ms", "append_ack_p99_ms", "tailer_poll_ms"])
        for d in tl:
            for r in d["rates"]:
                a, p, k = r["ack_to_deliver_ms"], r["append_to_deliver_ms"], r["append_to_ack_ms"]
                w.writerow([d["window"], d["heartbeat_ms"], r["rate"], r["appended"]] +
                           [round(a.get(x, -1), 3) for x in ("p50", "p90", "p99", "max")] +
                           [round(p.get("p50", -1), 3), round(p.get("p99", -1), 3),
                            round(k.get("p50", -1), 3), round(k.get("p99", -1), 3),
                            round(d.get("tailer_poll_ms", 0), 3)])
    print("csv:", base + ".csv", base + "-taillag.csv")

if want_plot == "1":
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print("plot: matplotlib not installed, skipped")
        sys.exit(0)
    fig, axes = plt.subplots(1, 2 if tl else 1, figsize=(12 if tl else 6.5, 4.5))
    ax = axes[0] if tl else axes
    for s in summary:
        T, drv = s["timeout_ms"], s["driver"]
        key = "kill_to_first_ack_ms" if drv == "bench" else "gap_ms"
        v = sorted(x[key] for r in runs if r["timeout_ms"] == T and r["driver"] == drv
                   for x in r["shards"] if x.get(key) is not None)
        if v:
            ax.step(v, [(k + 1) / len(v) for k in range(len(v))], where="post",
                    label="T=%d ms, %s (%s)" % (T, drv, "kill->first ack" if drv == "bench" else "gap_ms"))
    ax.set_xlabel("ms after kill -9 of the primary")
    ax.set_ylabel("fraction of shard failovers")
    ax.set_title("failover: no acknowledged append (3 replicas, %s appends/s)" % rate)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if tl:
        ax = axes[1]
        for d in tl:
            xs = [r["rate"] for r in d["rates"]]
            ax.plot(xs, [r["ack_to_deliver_ms"].get("p50", None) for r in d["rates"]], "o-",
                    label="p50 window %s, hb %d ms" % (d["window"], d["heartbeat_ms"]))
            ax.plot(xs, [r["ack_to_deliver_ms"].get("p99", None) for r in d["rates"]], "x--",
                    label="p99 window %s, hb %d ms" % (d["window"], d["heartbeat_ms"]))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("appends/s (one writer)")
        ax.set_ylabel("ms, acknowledged -> delivered to the tailer")
        ax.set_title("tail lag")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=110)
    print("plot:", base + ".png")
PY
rc=$?
[ $rc -eq 0 ] || failed=1
exit $failed
