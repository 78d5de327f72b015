#!/usr/bin/env bash
# rdma-bench.sh -- the fabric benchmark on both providers in ONE Soft-RoCE
# guest (scripts/rdma-guest.sh), reported as verbs/tcp ratios per cell.
#
# Usage: scripts/rdma-bench.sh [OPTIONS] [-- BENCH-ARGS...]
#   --results DIR   where to write rdma-bench.json (the ratios and every
#                   run's cells), rdma-bench.txt (the table) and the raw
#                   runs rdma-bench-verbs.json and rdma-bench-tcp.json
#                   (further rounds: rdma-bench-PROVIDER-rN.json).
#                   Default results
#   --rounds N      run the pair N times in the same guest, alternating the
#                   order (verbs tcp, tcp verbs, ...); the table shows the
#                   median of the N paired ratios and their range, a measure
#                   of the noise. Default 1 (one verbs run, one tcp run)
#   --keep DIR      keep the guest's output (console, each command's output,
#                   the raw JSONs under DIR/files) in DIR
#   --timeout S     hard limit for the guest, boot included. Default 600
#   -- ARGS         more dxl-bench-fabric options for every run; they come
#                   after the default matrix, so they override it
#
# In one guest, dxl-bench-fabric runs in fork mode on the guest's address
# 10.0.2.15 (rxe0's netdev; the forked server, the control connection and
# the TCP ping-pong all use it), once with --provider verbs (rxe0) and once
# with --provider tcp, with the same matrix:
#   ops read,write,cas,faa,send,rpc; sizes 64,4096 (CAS/FAA: 8); batch 1,16;
#   outstanding 1,8; threads 1; 200 ms per cell after 50 ms of warm-up; no
#   idle-CPU probe and no paired READ/ping-pong rounds (not per-cell figures)
# On the host it pairs the cells (op, size, batch, outstanding, threads) and
# computes verbs/tcp of the p50 latency (< 1: verbs is faster) and of ops/s
# (> 1: verbs is faster). Under QEMU's TCG both providers run on emulated
# CPUs: absolute numbers mean nothing; what the ratios mean: docs/rdma.md.
# About 40 s in all on a quiet 2-core host, 30 s more per extra round.
#
# Exit status: 0 every run passed (no failed completions, no data-check
# errors) and every cell was measured on both providers; 1 a run failed or
# reported data errors, or the guest failed; 2 usage; 77 skipped: QEMU cannot
# run here (rdma-guest.sh's one line "SKIPPED: rdma-guest: <why>").
# Environment: DXL_BUILD (build folder, default build), RDMA_GUEST_* (see
# scripts/rdma-guest.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cmdline="$0 $*"
results=$root/results keep='' limit=600 rounds=1 extra=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--results) results=${2:?}; shift 2 ;;
	--rounds) rounds=${2:?}; shift 2 ;;
	--keep) keep=${2:?}; shift 2 ;;
	--timeout) limit=${2:?}; shift 2 ;;
	-h | --help) usage ;;
	--) shift; extra=("$@"); break ;;
	*) echo "rdma-bench: unknown option $1" >&2; usage ;;
	esac
done
[[ $limit =~ ^[0-9]+$ ]] || usage
[[ $rounds =~ ^[1-9][0-9]*$ ]] || usage
command -v python3 > /dev/null || { echo "rdma-bench: python3 is needed for the report" >&2; exit 1; }

build=${DXL_BUILD:-build}
[ "${build:0:1}" = / ] || build=$root/$build
bench=$build/bin/dxl-bench-fabric
[ -x "$bench" ] || { echo "rdma-bench: $bench is not built (make -j2 all)" >&2; exit 1; }

# shellcheck disable=SC2054 # the commas separate the benchmark's list values
matrix=(--ops read,write,cas,faa,send,rpc --sizes 64,4096 --batch 1,16
	--outstanding 1,8 --threads 1 --duration-ms 200 --warmup 50
	--idle-ms 0 --paired-rounds 0)
args=("${matrix[@]}" "${extra[@]}")

work=$(mktemp -d /tmp/rdma-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
gout=${keep:-$work/guest}

# The guest's commands, in order; runs.txt tells the report which command
# wrote which file. The result files go to the scratch share ($RG_FILES,
# kept by rdma-guest.sh --out).
cmds=()
: > "$work/runs.txt"
for ((r = 1; r <= rounds; r++)); do
	if ((r % 2)); then order=(verbs tcp); else order=(tcp verbs); fi
	for p in "${order[@]}"; do
		c=$(printf '%q ' "$bench" --provider "$p" --fabric-addr 10.0.2.15:0 "${args[@]}" --quiet)
		cmds+=(-c "$c--out \"\$RG_FILES/fabric-$p-$r.json\"")
		echo "$(( ${#cmds[@]} / 2 )) $r $p" >> "$work/runs.txt"
	done
done

echo "rdma-bench: one guest, $rounds round(s) of verbs and tcp: dxl-bench-fabric --fabric-addr 10.0.2.15:0 ${args[*]}"
set +e
"$root/scripts/rdma-guest.sh" -q --timeout "$limit" --out "$gout" "${cmds[@]}" 2>&1 |
	tee "$work/guest.log"
grc=${PIPESTATUS[0]}
set -e
if [ "$grc" -eq 77 ]; then
	exit 77 # rdma-guest.sh printed its SKIPPED line
fi
[ -n "$keep" ] && cp "$work/guest.log" "$keep/"

mkdir -p "$results"
# The report: pairs the cells, prints the table, writes rdma-bench.json.
# Exits 1 on a missing or failed run, data errors or unpaired cells.
set +e
python3 - "$gout" "$results" "$grc" "$cmdline" "${args[*]}" "$work/guest.log" \
	"$work/runs.txt" << 'EOF'
import json, math, os, platform, shutil, statistics, sys, time

gout, results, grc, cmdline, args, glog, runs_txt = sys.argv[1:8]
grc = int(grc)
problems = []
OPS = ["read", "write", "cas", "faa", "send", "rpc"]
EXIT = {1: "set-up failure", 2: "failed completions, timeouts or wrong data",
        3: "the benchmark's time limit", 124: "killed by the guest's command time limit"}

def res_file(i, ext):
    try:
        return open(os.path.join(gout, "res", "%03d.%s" % (i, ext))).read().strip()
    except OSError:
        return None

runs = []  # {round, provider, exit, wall_s, ..., data}
for line in open(runs_txt):
    i, rnd, prov = line.split()
    i, rnd = int(i), int(rnd)
    rc = res_file(i, "rc")
    rc = int(rc) if rc is not None else None
    secs = res_file(i, "secs")
    run = {"round": rnd, "provider": prov, "command": i, "exit": rc,
           "wall_s": float(secs) if secs else None}
    name = "%s run of round %d" % (prov, rnd)
    if rc is None:
        problems.append("%s did not finish" % name)
    elif rc != 0:
        problems.append("%s exited %d (%s)" % (name, rc, EXIT.get(rc, "?")))
    path = os.path.join(gout, "files", "fabric-%s-%d.json" % (prov, rnd))
    d = None
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        problems.append("%s: no result file (%s)" % (name, e))
    if d is not None:
        if d.get("provider") != prov:
            problems.append("%s reports provider %r" % (name, d.get("provider")))
        ve, ee = d.get("verify_errors_total", 0), d.get("errors_total", 0)
        if ve or ee:
            problems.append("%s: %d data-check errors, %d failed completions" % (name, ve, ee))
        dest = "rdma-bench-%s.json" % prov if rnd == 1 else "rdma-bench-%s-r%d.json" % (prov, rnd)
        shutil.copyfile(path, os.path.join(results, dest))
        run.update(file=dest, verify_errors_total=ve, errors_total=ee,
                   tcp_pingpong_p50_ns={str(p["size"]): p["p50_ns"] for p in d.get("tcp_pingpong", [])},
                   loadavg_start=d["setup"]["host"].get("loadavg_start"),
                   loadavg_end=d["setup"]["host"].get("loadavg_end"),
                   bench_wall_s=d["setup"].get("wall_s"))
    run["data"] = d
    runs.append(run)

rounds = sorted({r["round"] for r in runs})

def cells(d):
    return {(c["op"], c["size"], c["batch"], c["outstanding"], c["threads"]): c
            for c in (d["results"] if d else [])}

def cell_bad(prov, c):
    if c.get("skipped"):
        return "%s: skipped (%s)" % (prov, c.get("note", ""))
    if c.get("verify_errors") or c.get("errors"):
        return "%s: %d data errors, %d failed completions" % (prov, c.get("verify_errors", 0), c.get("errors", 0))
    if not c.get("ops_per_s") or not c.get("p50_ns"):
        return "%s: no measurement" % prov
    return None

by = {(r["round"], r["provider"]): cells(r["data"]) for r in runs}
keys = set()
for c in by.values():
    keys |= set(c)
order = lambda k: (OPS.index(k[0]) if k[0] in OPS else 99,) + k[1:]
FIELDS = ("ops_per_s", "p50_ns", "p99_ns", "mean_ns", "samples", "ops", "verify_checked",
          "verify_errors", "errors")
rows = []
for k in sorted(keys, key=order):
    label = "cell %s %d B batch %d out %d thr %d" % k
    per = []
    ok = True
    for rnd in rounds:
        v, t = by.get((rnd, "verbs"), {}).get(k), by.get((rnd, "tcp"), {}).get(k)
        if v is None or t is None:
            problems.append("%s, round %d: not measured on %s" % (label, rnd, "tcp" if v else "verbs"))
            ok = False
            continue
        bad = [b for b in (cell_bad("verbs", v), cell_bad("tcp", t)) if b]
        if bad:
            problems.append("%s, round %d: %s" % (label, rnd, "; ".join(bad)))
            ok = False
        e = {"round": rnd, "verbs": {f: v.get(f) for f in FIELDS}, "tcp": {f: t.get(f) for f in FIELDS}}
        if not bad:
            e["ratio_p50"] = round(v["p50_ns"] / t["p50_ns"], 3)
            e["ratio_ops_per_s"] = round(v["ops_per_s"] / t["ops_per_s"], 3)
        per.append(e)
    row = {"op": k[0], "size": k[1], "batch": k[2], "outstanding": k[3], "threads": k[4],
           "ok": ok, "rounds": per}
    if ok:
        med = lambda xs: round(statistics.median(xs), 3)
        for prov in ("verbs", "tcp"):
            row[prov + "_p50_ns"] = med([e[prov]["p50_ns"] for e in per])
            row[prov + "_ops_per_s"] = med([e[prov]["ops_per_s"] for e in per])
        for f in ("ratio_p50", "ratio_ops_per_s"):
            xs = [e[f] for e in per]
            row[f] = med(xs)
            row[f + "_min"], row[f + "_max"] = min(xs), max(xs)
    rows.append(row)

def gmean(xs):
    xs = [x for x in xs if x]
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3) if xs else None

summary = []
for op in OPS + [None]:
    rs = [r for r in rows if r["ok"] and (op is None or r["op"] == op)]
    if rs:
        summary.append({"op": op or "all", "cells": len(rs),
                        "gmean_ratio_p50": gmean([r["ratio_p50"] for r in rs]),
                        "gmean_ratio_ops_per_s": gmean([r["ratio_ops_per_s"] for r in rs])})

# Every run also measures a plain TCP ping-pong (blocking send/recv): the
# same thing in every run, so its spread says how much the guest's speed
# moved during the benchmark (noise the ratios carry too).
pp = {}
for r in runs:
    for s, ns in (r.get("tcp_pingpong_p50_ns") or {}).items():
        if ns:
            pp.setdefault(s, []).append(ns)
pp_spread = {s: {"min_ns": min(v), "max_ns": max(v), "max_over_min": round(max(v) / min(v), 2)}
             for s, v in sorted(pp.items(), key=lambda x: int(x[0]))}

n = len(rounds)
us = lambda ns: "%.1f" % (ns / 1000.0) if ns else "-"
kops = lambda x: "%.1f" % (x / 1000.0) if x else "-"
def rat(r, f):
    if not r["ok"]:
        return "-"
    if n == 1:
        return "%.2f" % r[f]
    return "%.2f %s" % (r[f], "[%.2f-%.2f]" % (r[f + "_min"], r[f + "_max"]))

w = 7 if n == 1 else 19
lines = ["verbs/tcp in one Soft-RoCE guest (QEMU TCG, %d round%s%s): p50 ratio < 1 and ops/s ratio > 1 = verbs faster"
         % (n, "s" if n > 1 else "", ", median [range] of the rounds" if n > 1 else ""),
         "%-5s %5s %5s %3s %3s | %9s %9s %*s | %9s %9s %*s" % (
             "op", "size", "batch", "out", "thr", "verbs p50", "tcp p50", w, "ratio",
             "verbs", "tcp", w, "ratio"),
         "%-5s %5s %5s %3s %3s | %9s %9s %*s | %9s %9s %*s" % (
             "", "B", "", "", "", "us", "us", w, "", "kops/s", "kops/s", w, "")]
for r in rows:
    lines.append("%-5s %5d %5d %3d %3d | %9s %9s %*s | %9s %9s %*s%s" % (
        r["op"], r["size"], r["batch"], r["outstanding"], r["threads"],
        us(r.get("verbs_p50_ns")), us(r.get("tcp_p50_ns")), w, rat(r, "ratio_p50"),
        kops(r.get("verbs_ops_per_s")), kops(r.get("tcp_ops_per_s")), w, rat(r, "ratio_ops_per_s"),
        "" if r["ok"] else "  FAILED"))
lines.append("geometric means of the ratios (p50, ops/s): " + "; ".join(
    "%s %.2f, %.2f" % (s["op"], s["gmean_ratio_p50"], s["gmean_ratio_ops_per_s"]) for s in summary))
if pp_spread:
    lines.append("TCP ping-pong p50 across the %d runs (guest speed drift): " % len(runs) + "; ".join(
        "%s B %s-%s us" % (s, us(v["min_ns"]), us(v["max_ns"])) for s, v in pp_spread.items()))
text = "\n".join(lines)
print(text)

for r in runs:
    del r["data"]
doc = {
    "benchmark": "rdma-bench", "format_version": 1,
    "description": "dxl-bench-fabric on the verbs (rxe0, Soft-RoCE) and tcp providers in one QEMU TCG "
                   "guest; ratio_p50 = verbs p50 / tcp p50, ratio_ops_per_s = verbs ops/s / tcp ops/s "
                   "(per round, paired; the row's value is the median over the rounds)",
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "command_line": cmdline, "bench_args": args, "fabric_addr": "10.0.2.15:0",
    "rounds": n, "host": {"nodename": platform.node(), "cpus": os.cpu_count(),
                          "loadavg_end": list(os.getloadavg())},
    "guest_exit": grc,
    "runs": runs, "tcp_pingpong_spread": pp_spread,
    "results": rows, "summary": summary, "problems": problems,
}
try:
    doc["guest_summary"] = [l.strip() for l in open(glog) if l.startswith("rdma-guest: ")]
except OSError:
    pass
with open(os.path.join(results, "rdma-bench.json"), "w") as f:
    json.dump(doc, f, indent=1)
with open(os.path.join(results, "rdma-bench.txt"), "w") as f:
    f.write(text + "\n")
print("rdma-bench: wrote rdma-bench.json, rdma-bench.txt and the raw runs to %s" % results)
if problems or grc != 0:
    for p in problems:
        print("rdma-bench: FAILED: " + p, file=sys.stderr)
    if not problems:
        print("rdma-bench: FAILED: the guest run failed (exit %d, output above)" % grc, file=sys.stderr)
    sys.exit(1)
EOF
prc=$?
set -e
exit "$prc"
