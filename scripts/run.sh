#!/usr/bin/env bash
# run.sh -- dxl's main job on this machine, from a fresh Debian 12 checkout:
# install what is missing, build, then run dxl on a local loopback cluster:
#   1. the fabric: two processes, every operation, against a raw TCP ping-pong
#   2. the replicated log: 1 and 3 replica processes taking pipelined appends
#      from a writer, against a 3-server ZooKeeper ensemble doing the same
#      appends (started here from the Debian package, stopped after)
# Results: results/fabric.json, results/log.json (and the tables on stdout).
# Usage: scripts/run.sh [--full]   (--full: the whole benchmark matrices)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=--quick
if [ "${1:-}" = "--full" ]; then mode=""; shift; fi
[ $# -eq 0 ] || { echo "usage: scripts/run.sh [--full]" >&2; exit 2; }

scripts/install-deps.sh
make -j"${JOBS:-$(nproc)}" all
mkdir -p results

echo
echo "=== 1. fabric: two processes on loopback, tcp provider"
build/bin/dxl-bench-fabric $mode --out results/fabric.json

echo
echo "=== 2. replicated log: replica processes and a writer, against ZooKeeper"
build/bin/dxl-bench-log $mode --out results/log.json

echo
echo "Done. Results: results/fabric.json results/log.json"
echo "(the tables above; plots: python3 bench/plot-fabric.py results/fabric.json)"
