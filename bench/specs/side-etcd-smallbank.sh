#!/usr/bin/env bash
# side-etcd-smallbank.sh -- the etcd side of a SmallBank comparison for
# dxl-bench-compare (docs/benchmarks.md):
#   setup     scripts/etcd.sh start (MEMBERS members on loopback, every commit
#             fsynced by a quorum) in $DXLB_STATE/etcd, load ACCOUNTS
#             accounts (a 1 s run that loads them first); writes
#             $DXLB_STATE/env (ETCD_ENDPOINTS), config.json (etcd's version and
#             every member's command line), datadirs and pids
#   warmup|rep  dxl-bench-smallbank-etcd for $DXLB_SECONDS s, THREADS x
#             COROUTINES sessions (one transaction in flight each), result to
#             $DXLB_OUT (a failed money check exits 2: the run fails)
#   teardown  scripts/etcd.sh stop
# Environment: DXL_BIN [build/bin], DXL_SCRIPTS [scripts], ACCOUNTS [20000],
# MEMBERS [3], THREADS [1], COROUTINES [8]; OFFERED: an offered rate
# (transactions/s, open loop; the sessions then cap what is in flight).
set -euo pipefail
B=${DXL_BIN:-build/bin}
S=${DXL_SCRIPTS:-scripts}
e=$DXLB_STATE/etcd
case "$DXLB_PHASE" in
setup)
	ep=$("$S/etcd.sh" start "$e" --members "${MEMBERS:-3}")
	echo "ETCD_ENDPOINTS=$ep" > "$DXLB_STATE/env"
	"$B/dxl-bench-smallbank-etcd" --endpoints "$ep" --accounts "${ACCOUNTS:-20000}" \
		--duration 1 --threads 1 --sessions 1
	python3 - "$e" "$DXLB_STATE" <<'PY'
import glob, json, os, subprocess, sys
e, state = sys.argv[1:]
members, pids = [], []
for pf in sorted(glob.glob(os.path.join(e, "m*", "pid"))):
    pid = open(pf).read().strip()
    pids.append(pid)
    try:
        cmd = open("/proc/%s/cmdline" % pid).read().split("\0")
    except OSError:
        cmd = None
    members.append({"pid": int(pid), "command": [c for c in cmd if c] if cmd else None})
v = subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout.strip()
json.dump({"system": "etcd", "version": v, "members": members,
           "durability": "every commit fsynced by a quorum (etcd has no switch to skip it)"},
          open(os.path.join(state, "config.json"), "w"), indent=1)
open(os.path.join(state, "pids"), "w").write("".join(p + "\n" for p in pids))
open(os.path.join(state, "datadirs"), "w").write(
    "".join(os.path.join(os.path.dirname(p), "data") + "\n"
            for p in sorted(glob.glob(os.path.join(e, "m*", "pid")))))
PY
	;;
warmup|rep)
	"$B/dxl-bench-smallbank-etcd" --endpoints "$ETCD_ENDPOINTS" --no-load \
		--accounts "${ACCOUNTS:-20000}" --duration "$DXLB_SECONDS" \
		--threads "${THREADS:-1}" --sessions "${COROUTINES:-8}" \
		${OFFERED:+--rate "$OFFERED"} --json "$DXLB_OUT"
	;;
teardown)
	"$S/etcd.sh" stop "$e"
	;;
esac
