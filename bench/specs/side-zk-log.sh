#!/usr/bin/env bash
# side-zk-log.sh -- the ZooKeeper side of the log / ZooKeeper comparison for
# dxl-bench-compare (docs/benchmarks.md):
#   setup     a 3-server ensemble on loopback (scripts/zk.sh) with production
#             JVM settings (DXL_ZK_JVM=production: 1 GiB heap, the default
#             collector and JIT) and forceSync=yes (fsync per commit: the
#             durable peer of dxl msync); writes $DXLB_STATE/env (ZK_CONNECT),
#             config.json (ZooKeeper's and Java's versions, the JVM options,
#             zoo.cfg), datadirs and pids. The runner's warm-up warms it.
#   warmup|rep  'dxl-bench-log --only zk --zk-connect': persistent-sequential
#             creates of SIZE bytes, INFLIGHT outstanding, $DXLB_SECONDS s
#   teardown  scripts/zk.sh stop
# Environment: DXL_BIN [build/bin], DXL_SCRIPTS [scripts], SIZE [1024],
# INFLIGHT [16], ZK_FORCESYNC [yes]; OFFERED: an offered rate (creates/s,
# open loop), INFLIGHT then caps what is outstanding.
set -euo pipefail
B=${DXL_BIN:-build/bin}
S=${DXL_SCRIPTS:-scripts}
z=$DXLB_STATE/zk
case "$DXLB_PHASE" in
setup)
	c=$(DXL_ZK_JVM=production DXL_ZK_FORCESYNC=${ZK_FORCESYNC:-yes} "$S/zk.sh" start "$z" --servers 3)
	echo "ZK_CONNECT=$c" > "$DXLB_STATE/env"
	python3 - "$z" "$DXLB_STATE" <<'PY'
import glob, json, os, subprocess, sys
z, state = sys.argv[1:]
def out(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
        return (r.stdout + r.stderr).strip()
    except OSError:
        return None
servers, pids = [], []
for sd in sorted(glob.glob(os.path.join(z, "s[0-9]*"))):
    pid = open(os.path.join(sd, "pid")).read().strip()
    pids.append(pid)
    servers.append({"pid": int(pid), "jvm": open(os.path.join(sd, "jvm")).read().strip(),
                    "zoo_cfg": open(os.path.join(sd, "zoo.cfg")).read().strip().splitlines()})
json.dump({"system": "ZooKeeper", "version": out(["dpkg-query", "-W", "-f=${Version}", "zookeeper"]),
           "java": (out(["java", "-version"]) or "").splitlines()[:1],
           "jvm": servers[0]["jvm"] if servers else None, "servers": servers},
          open(os.path.join(state, "config.json"), "w"), indent=1)
open(os.path.join(state, "pids"), "w").write("".join(p + "\n" for p in pids))
open(os.path.join(state, "datadirs"), "w").write(
    "".join(os.path.join(z, "s%d" % (i + 1), "data") + "\n" for i in range(len(servers))))
PY
	;;
warmup|rep)
	ms=$(awk -v s="$DXLB_SECONDS" 'BEGIN { printf "%d", s * 1000 }')
	"$B/dxl-bench-log" --only zk --zk-connect "$ZK_CONNECT" --zk-warmup-ms 0 \
		--sizes "${SIZE:-1024}" --outstanding "${INFLIGHT:-16}" --duration-ms "$ms" \
		${OFFERED:+--rate "$OFFERED"} --out "$DXLB_OUT"
	;;
teardown)
	"$S/zk.sh" stop "$z"
	;;
esac
