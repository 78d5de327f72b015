#!/usr/bin/env bash
# zk.sh -- run a throw-away ZooKeeper server (or 3-server ensemble) from the
# Debian package, without systemd, for tests, benchmarks and local clusters.
#
#   scripts/zk.sh start DIR [--servers 1|3] [--port P]   prints the connect string
#   scripts/zk.sh stop DIR
#   scripts/zk.sh status DIR                             exit 0 if every server answers
#   scripts/zk.sh kill DIR N                             SIGKILL server N (1-based)
#   scripts/zk.sh restart DIR N                          start server N again
#
# DIR holds each server's zoo.cfg, data, log and pid; the connect string is
# also written to DIR/connect, the JVM options of the servers to DIR/s1/jvm.
#
# JVM: by default a small footprint for tests and local clusters on a shared
# machine (128 MB heap, serial GC, C1 only). DXL_ZK_JVM=production gives the
# settings a ZooKeeper is measured with (benchmarks, issue 18): a 1 GiB heap
# (-Xms = -Xmx), the JVM's default collector and JIT; DXL_ZK_JVM_OPTS
# replaces the options altogether. Ports: every client, quorum and election port
# is a distinct port free at start (with --port P: client ports P, P+1, ..).
# 'start' on a DIR whose server(s) still run reuses them: it starts any
# server of the ensemble that is down on its saved ports, waits until every
# one answers and prints the saved connect string (a server that runs but
# does not answer within 30 s is an error: 'zk.sh stop DIR' first).
set -euo pipefail

die() { echo "zk.sh: $*" >&2; exit 1; }
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: zk.sh start|stop|status|kill|restart DIR [...]"
shift 2

JAR=/usr/share/java/zookeeper.jar
cp_for() {
	local cp="$JAR"
	for j in slf4j-api slf4j-simple netty-handler netty-transport netty-common \
		netty-buffer netty-codec netty-resolver netty-transport-native-unix-common \
		netty-transport-classes-epoll commons-cli commons-io jute metrics-core \
		snappy-java audience-annotations jline; do
		[ -f "/usr/share/java/$j.jar" ] && cp="$cp:/usr/share/java/$j.jar"
	done
	echo "$cp"
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

four() { # four-letter word to 127.0.0.1:port
	python3 - "$1" "$2" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
    s.sendall(sys.argv[2].encode()); out = b""
    while True:
        b = s.recv(4096)
        if not b: break
        out += b
    print(out.decode(errors="replace"))
except Exception:
    sys.exit(1)
PY
}

alive() { # N: server N of DIR runs (its pid is a ZooKeeper server started
	   # on an s<N>/zoo.cfg, not a pid reused by another program)
	local sd="$dir/s$1" pid
	[ -f "$sd/pid" ] || return 1
	pid=$(cat "$sd/pid")
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] &&
		tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null |
		grep -q "QuorumPeerMain .*s$1/zoo.cfg"
}

start_one() { # N
	local n=$1 sd="$dir/s$1"
	local port; port=$(cat "$sd/port")
	alive "$n" && return 0
	local jvm
	case "${DXL_ZK_JVM:-small}" in
	small) jvm="-Xmx128m -Xms16m -XX:+UseSerialGC -XX:TieredStopAtLevel=1" ;;
	production) jvm="-Xms1g -Xmx1g" ;;
	*) die "DXL_ZK_JVM must be small or production" ;;
	esac
	jvm=${DXL_ZK_JVM_OPTS:-$jvm}
	echo "$jvm" > "$sd/jvm"
	# shellcheck disable=SC2086
	setsid java $jvm \
		-Dzookeeper.log.dir="$sd" -Dzookeeper.admin.enableServer=false \
		-cp "$(cp_for)" org.apache.zookeeper.server.quorum.QuorumPeerMain \
		"$sd/zoo.cfg" >"$sd/server.log" 2>&1 < /dev/null &
	echo $! > "$sd/pid"
}

wait_ready() { # N [seconds]
	local sd="$dir/s$1" t=${2:-30} i
	local port; port=$(cat "$sd/port")
	for ((i = 0; i < t * 10; i++)); do
		if four "$port" srvr 2>/dev/null | grep -q '^Mode:'; then return 0; fi
		alive "$1" || break
		sleep 0.1
	done
	echo "zk.sh: server $1 did not become ready; its log:" >&2
	tail -30 "$sd/server.log" >&2 || true
	return 1
}

case "$cmd" in
start)
	servers=1 port=""
	while [ $# -gt 0 ]; do
		case "$1" in
		--servers) servers=$2; shift 2 ;;
		--port) port=$2; shift 2 ;;
		*) die "unknown option $1" ;;
		esac
	done
	[ "$servers" = 1 ] || [ "$servers" = 3 ] || die "--servers must be 1 or 3"
	[ -f "$JAR" ] || die "$JAR not found: run scripts/install-deps.sh (Debian package zookeeper)"
	command -v java >/dev/null || die "java not found: apt-get install default-jre-headless"
	mkdir -p "$dir"
	# an earlier start of DIR still runs: reuse it (never a second server
	# on new ports while the old one holds the data directory)
	running=0 configured=0
	for sd in "$dir"/s*; do
		[ -f "$sd/port" ] || continue
		configured=$((configured + 1))
		alive "${sd##*/s}" && running=$((running + 1))
	done
	if [ "$running" -gt 0 ]; then
		[ "$configured" = "$servers" ] ||
			die "$dir has $configured server(s) configured, $running running; asked for $servers: 'zk.sh stop $dir' first"
		if [ -n "$port" ] && [ "$(cat "$dir/s1/port")" != "$port" ]; then
			die "$dir runs on client port $(cat "$dir/s1/port"), not $port: 'zk.sh stop $dir' first"
		fi
		connect=""
		for ((n = 1; n <= servers; n++)); do
			start_one "$n"
			connect="${connect:+$connect,}127.0.0.1:$(cat "$dir/s$n/port")"
		done
		for ((n = 1; n <= servers; n++)); do
			wait_ready "$n" 30 ||
				die "server $n of $dir runs but does not answer: 'zk.sh stop $dir' first"
		done
		echo "zk.sh: reusing the ZooKeeper already running in $dir" >&2
		echo "$connect" > "$dir/connect"
		echo "$connect"
		exit 0
	fi
	# every port distinct and free when chosen (client ports P, P+1, ... if
	# --port is given); each server keeps its ports in its folder, so a
	# restart reuses them
	read -r -a ports <<< "$(free_ports $((3 * servers)))"
	connect="" quorum=""
	for ((n = 1; n <= servers; n++)); do
		if [ -n "$port" ]; then cport=$((port + n - 1)); else cport=${ports[$((3 * n - 3))]}; fi
		cports[$n]=$cport
		if [ "$servers" -gt 1 ]; then
			quorum="${quorum}server.$n=127.0.0.1:${ports[$((3 * n - 2))]}:${ports[$((3 * n - 1))]}"$'\n'
		fi
		connect="${connect:+$connect,}127.0.0.1:$cport"
	done
	for ((n = 1; n <= servers; n++)); do
		sd="$dir/s$n"; mkdir -p "$sd/data"
		echo "${cports[$n]}" > "$sd/port"
		echo "$n" > "$sd/data/myid"
		cat > "$sd/zoo.cfg" <<CFG
tickTime=200
initLimit=50
syncLimit=25
dataDir=$sd/data
clientPort=${cports[$n]}
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr,stat
maxClientCnxns=0
minSessionTimeout=400
maxSessionTimeout=60000
forceSync=${DXL_ZK_FORCESYNC:-yes}
$quorum
CFG
		start_one "$n"
	done
	for ((n = 1; n <= servers; n++)); do wait_ready "$n" 60; done
	echo "$connect" > "$dir/connect"
	echo "$connect"
	;;
stop)
	for pf in "$dir"/s*/pid; do
		[ -f "$pf" ] || continue
		sd=${pf%/pid}
		if alive "${sd##*/s}"; then # (not a pid reused by another program)
			pid=$(cat "$pf")
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$pf"
	done
	;;
status)
	ok=0
	for sd in "$dir"/s*; do
		[ -f "$sd/port" ] || continue
		if mode=$(four "$(cat "$sd/port")" srvr 2>/dev/null | grep '^Mode:'); then
			echo "$(basename "$sd"): $mode"
		else
			echo "$(basename "$sd"): down"; ok=1
		fi
	done
	exit $ok
	;;
kill)
	n=${1:?server number}; pf="$dir/s$n/pid"
	if alive "$n"; then kill -KILL "$(cat "$pf")" 2>/dev/null || true; fi
	rm -f "$pf"
	;;
restart)
	n=${1:?server number}; start_one "$n"; wait_ready "$n" 60 || true
	;;
*) die "unknown command $cmd" ;;
esac
