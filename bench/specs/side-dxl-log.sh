#!/usr/bin/env bash
# side-dxl-log.sh -- the dxl side of the log / ZooKeeper comparison for
# dxl-bench-compare (docs/benchmarks.md): every run is one append cell of
# 'dxl-bench-log --only append': REPLICAS replica processes the benchmark
# starts (the log's data path over the tcp fabric on loopback; not
# dxl-replica daemons: "data path only"), DURABILITY [msync], one writer,
# SIZE-byte payloads, INFLIGHT appends outstanding, $DXLB_SECONDS s.
# Environment: DXL_BIN [build/bin], REPLICAS [3], DURABILITY [msync], SIZE
# [1024], INFLIGHT [16]; OFFERED: an offered rate (appends/s, open loop:
# latency from each append's intended start), INFLIGHT then caps what is
# outstanding.
set -euo pipefail
B=${DXL_BIN:-build/bin}
case "$DXLB_PHASE" in
setup)
	python3 - "$DXLB_STATE" <<'PY'
import json, os, sys
e = os.environ
json.dump({"system": "dxl log (data path only: replica processes of dxl-bench-log)",
           "replicas": int(e.get("REPLICAS", "3")), "durability": e.get("DURABILITY", "msync"),
           "provider": "tcp (loopback)", "writers": 1},
          open(os.path.join(sys.argv[1], "config.json"), "w"), indent=1)
PY
	echo "${TMPDIR:-/tmp}" > "$DXLB_STATE/datadirs"
	;;
warmup|rep)
	ms=$(awk -v s="$DXLB_SECONDS" 'BEGIN { printf "%d", s * 1000 }')
	"$B/dxl-bench-log" --only append --replicas "${REPLICAS:-3}" \
		--durability "${DURABILITY:-msync}" --sizes "${SIZE:-1024}" \
		--outstanding "${INFLIGHT:-16}" --writers 1 --duration-ms "$ms" \
		${OFFERED:+--rate "$OFFERED"} --out "$DXLB_OUT"
	;;
teardown) ;;
esac
