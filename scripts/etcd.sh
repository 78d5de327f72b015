#!/usr/bin/env bash
# etcd.sh -- run a throw-away 3-member etcd cluster on loopback from the
# Debian package (etcd-server), without systemd, for the SmallBank peer
# benchmark (docs/bench-smallbank-etcd.md).
#
#   scripts/etcd.sh start DIR [--members 1|3]   prints the client endpoints
#   scripts/etcd.sh stop DIR                    stops every member, waits
#   scripts/etcd.sh status DIR                  exit 0 if every member is healthy
#
# DIR holds each member's data (DIR/mN/data), log (DIR/mN/etcd.log), pid and
# ports; the endpoints "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3" are printed
# on stdout and written to DIR/endpoints. Every client and peer port is one
# that was free at start. /usr/bin/etcd is installed with apt-get (as root)
# if it is missing. etcd 3.4 has no switch to skip fsync: every commit is
# fsynced on a quorum of members.
set -euo pipefail

die() { echo "etcd.sh: $*" >&2; exit 1; }
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: etcd.sh start|stop|status DIR [--members 1|3]"
shift 2

ETCD=/usr/bin/etcd

install_etcd() {
	[ -x "$ETCD" ] && return 0
	[ "$(id -u)" -eq 0 ] || die "$ETCD missing; as root: apt-get install etcd-server"
	echo "etcd.sh: installing etcd-server" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	# the package's own service is never started here (no systemd; and
	# policy-rc.d in containers): we run our own members below
	apt-get install -y -qq --no-install-recommends etcd-server </dev/null >&2
	[ -x "$ETCD" ] || die "apt-get did not provide $ETCD"
}

free_ports() { # N: N distinct ports that are free now (held together while chosen)
	python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
PY
}

healthy() { # client port: exit 0 if GET /health says true
	python3 - "$1" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2) as r:
        sys.exit(0 if json.load(r).get("health") == "true" else 1)
except Exception:
    sys.exit(1)
PY
}

stop_pid() { # pid file: TERM, wait up to 5 s, KILL, wait until gone
	local pf=$1 pid
	[ -f "$pf" ] || return 0
	pid=$(cat "$pf")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
	fi
	rm -f "$pf"
}

case "$cmd" in
start)
	members=3
	while [ $# -gt 0 ]; do
		case "$1" in
		--members) members=$2; shift 2 ;;
		*) die "unknown option $1" ;;
		esac
	done
	[ "$members" = 1 ] || [ "$members" = 3 ] || die "--members must be 1 or 3"
	install_etcd
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	for pf in "$dir"/m*/pid; do
		[ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null && \
			die "a member in $dir is running already (stop it first)"
	done
	# a fresh cluster every time: old member data would carry another
	# cluster id and other peer ports
	rm -rf "$dir"/m[0-9]*
	read -r -a ports <<< "$(free_ports $((2 * members)))"
	cluster="" endpoints=""
	for ((n = 1; n <= members; n++)); do
		cport[$n]=${ports[$((2 * n - 2))]}
		pport[$n]=${ports[$((2 * n - 1))]}
		cluster="${cluster:+$cluster,}m$n=http://127.0.0.1:${pport[$n]}"
		endpoints="${endpoints:+$endpoints,}127.0.0.1:${cport[$n]}"
	done
	token="dxl-$$-$(date +%s%N)"
	for ((n = 1; n <= members; n++)); do
		md="$dir/m$n"; mkdir -p "$md"
		echo "${cport[$n]}" > "$md/port"
		setsid "$ETCD" --name "m$n" --data-dir "$md/data" \
			--listen-client-urls "http://127.0.0.1:${cport[$n]}" \
			--advertise-client-urls "http://127.0.0.1:${cport[$n]}" \
			--listen-peer-urls "http://127.0.0.1:${pport[$n]}" \
			--initial-advertise-peer-urls "http://127.0.0.1:${pport[$n]}" \
			--initial-cluster "$cluster" --initial-cluster-state new \
			--initial-cluster-token "$token" \
			--logger zap --log-outputs stderr --log-level warn \
			>"$md/etcd.log" 2>&1 </dev/null &
		echo $! > "$md/pid"
	done
	for ((n = 1; n <= members; n++)); do
		ok=0
		for ((i = 0; i < 600; i++)); do
			if healthy "${cport[$n]}"; then ok=1; break; fi
			kill -0 "$(cat "$dir/m$n/pid")" 2>/dev/null || break
			sleep 0.1
		done
		if [ $ok = 0 ]; then
			echo "etcd.sh: member m$n did not become healthy; its log:" >&2
			tail -30 "$dir/m$n/etcd.log" >&2 || true
			for pf in "$dir"/m*/pid; do stop_pid "$pf"; done
			exit 1
		fi
	done
	echo "$endpoints" > "$dir/endpoints"
	echo "$endpoints"
	;;
stop)
	for pf in "$dir"/m*/pid; do stop_pid "$pf"; done
	;;
status)
	rc=0
	for md in "$dir"/m*; do
		[ -f "$md/port" ] || continue
		if healthy "$(cat "$md/port")"; then
			echo "$(basename "$md"): healthy"
		else
			echo "$(basename "$md"): down"; rc=1
		fi
	done
	exit $rc
	;;
*) die "unknown command $cmd" ;;
esac
