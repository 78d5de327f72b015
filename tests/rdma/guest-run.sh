#!/bin/bash
# guest-run.sh -- the command runner INSIDE the Soft-RoCE guest, chrooted
# into the host's root (started by scripts/rdma-guest/init.sh; see
# docs/rdma.md). Not meant to be run on the host.
#
# Usage: guest-run.sh DIR
#   DIR/conf  RG_CWD (working folder), RG_CMD_TIMEOUT (seconds per command),
#             RG_ROOT (the dxl source tree)
#   DIR/env   the commands' environment (export lines, written by the host)
#   DIR/cmds  one shell command line per line, run with bash -c in order
# Writes DIR/res/NNN.{cmd,out,err,rc,secs} for each command; ends with
# DIR/res/finished. Every command runs in its own process group, which is
# killed when the command ends, so no stray server survives into the next.
#
# Helpers the command lines can use (exported functions):
#   pair PORT 'SERVER' 'CLIENT'  start SERVER, wait until something listens on
#       PORT (TCP, or an rdma_cm LISTEN id), run CLIENT, wait for SERVER; both
#       must exit 0. The server's output is printed after the client's.
#   wait_listen PORT [PID]       wait (<= 20 s) for a TCP or rdma_cm listener
#   check_gid1                   rxe0 port 1: ACTIVE, RoCE v2 GID at index 1
#                                is IPv4-mapped 10.0.2.15
#   ext4_scratch                 mount (once) an ext4 file system on a loop
#       device over a file in the guest's RAM at /tmp/rg-ext4, print that
#       path: a disk file system (msync writes blocks, O_DIRECT reads them)
#       for durability tests (DXL_TEST_DISK_DIR)
#   zk_up                        print a ZooKeeper connect string: the host's
#       DXL_TEST_ZK if it answers (QEMU forwards 10.0.2.2 to the host), else
#       one started in the guest (once, /tmp/rg-zk, scripts/zk.sh: the host's
#       java over 9p, ~20 s under TCG) that runs until the guest ends
#   cluster_logs                 print what the daemons of kept test
#       clusters (DXL_TEST_KEEP=1, /tmp/dxl-test-*) logged at warn or error,
#       and each log's last lines: for a cluster test that failed
#   dxl_tests NAME|GLOB...       run the built dxl test binaries that exist
#       ($RG_ROOT/${DXL_BUILD:-build}/tests/NAME) with scripts/run-tests.sh; names
#       that are not built are listed and skipped; fails if none exists.
set -u
dir=${1:?usage: guest-run.sh DIR}
RG_CWD=/ RG_CMD_TIMEOUT=300 RG_ROOT=/
. "$dir/conf"
export RG_ROOT

# Memory registration pins pages and counts them against RLIMIT_MEMLOCK
# (8 MiB by default): larger ibv_reg_mr calls fail with ENOMEM. Root is exempt
# (CAP_IPC_LOCK), but a command that drops privileges is not.
ulimit -l unlimited || echo "guest-run: warning: ulimit -l unlimited failed" >&2
ulimit -c 0

. "$dir/env"

wait_listen() { # PORT [PID]
	local port=$1 pid=${2:-} hex end=$((SECONDS + 20))
	hex=$(printf '%04X' "$port")
	while [ "$SECONDS" -lt "$end" ]; do
		# TCP listener (state 0A) on any local address
		if grep -qE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " \
			/proc/net/tcp /proc/net/tcp6 2>/dev/null; then
			return 0
		fi
		# rdma_cm listener (perftest -R, rping, dxl's verbs provider):
		# "... state LISTEN ... src-addr 10.0.2.15:7174 ..."
		if rdma resource show cm_id 2>/dev/null |
			grep -qE "state LISTEN .*src-addr [^ ]*:$port( |$)"; then
			return 0
		fi
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			echo "wait_listen: server (pid $pid) exited before listening on port $port" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "wait_listen: nothing listens on port $port after 20 s" >&2
	return 1
}

pair() { # PORT 'SERVER' 'CLIENT'
	local port=$1 srv=$2 cli=$3 so sp crc src end
	so=$(mktemp /tmp/pair-server.XXXXXX)
	bash -c "$srv" > "$so" 2>&1 &
	sp=$!
	if ! wait_listen "$port" "$sp"; then
		kill -KILL "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
		echo "pair: server did not come up: $srv"; echo "--- server output:"; cat "$so"
		rm -f "$so"
		return 1
	fi
	echo "--- client: $cli"
	local co
	co=$(mktemp /tmp/pair-client.XXXXXX)
	bash -c "$cli" > "$co" 2>&1
	crc=$?
	cat "$co"
	# an rdma_cm listener listed as LISTEN may still reject the first
	# request (REJECTED, status 8: no listener yet; seen once in CI with
	# perftest -R): the server still waits, so the client tries once more
	if [ "$crc" -ne 0 ] && kill -0 "$sp" 2>/dev/null &&
		grep -q "RDMA_CM_EVENT_REJECTED" "$co"; then
		echo "pair: client rejected by a listener not ready yet; trying once more in 1 s"
		sleep 1
		bash -c "$cli"
		crc=$?
	fi
	rm -f "$co"
	# The server ends by itself after a successful exchange; after a client
	# failure it may wait forever, so give it 10 s.
	end=$((SECONDS + 10))
	while [ "$SECONDS" -lt "$end" ] && kill -0 "$sp" 2>/dev/null; do
		sleep 0.1
	done
	if kill -0 "$sp" 2>/dev/null; then
		echo "pair: server still running 10 s after the client ended; killing it"
		kill -KILL "$sp" 2>/dev/null
	fi
	wait "$sp"
	src=$?
	echo "--- server: $srv"
	cat "$so"
	rm -f "$so"
	echo "--- pair: client exit $crc, server exit $src"
	[ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
}

check_gid1() {
	local p=/sys/class/infiniband/rxe0/ports/1 gid type state
	state=$(cat "$p/state"); gid=$(cat "$p/gids/1"); type=$(cat "$p/gid_attrs/types/1")
	echo "rxe0 port 1: state '$state', gid[1] $gid ($type)"
	case $state in *ACTIVE) ;; *) echo "check_gid1: port not ACTIVE"; return 1 ;; esac
	[ "$gid" = "0000:0000:0000:0000:0000:ffff:0a00:020f" ] ||
		{ echo "check_gid1: gid[1] is not ::ffff:10.0.2.15"; return 1; }
	[ "$type" = "RoCE v2" ] || { echo "check_gid1: gid[1] is not RoCE v2"; return 1; }
}

ext4_scratch() {
	local m=/tmp/rg-ext4 img=/tmp/rg-ext4.img dev
	if ! grep -q " $m ext4 " /proc/mounts; then
		mkdir -p "$m" &&
			dd if=/dev/zero of="$img" bs=1M count=96 status=none &&
			mkfs.ext4 -q -F "$img" &&
			dev=$(losetup -f --show "$img") &&
			mount -t ext4 "$dev" "$m" ||
			{ echo "ext4_scratch: cannot mount ext4 on a loop device" >&2; return 1; }
	fi
	echo "$m"
}

zk_ok() { # HOST:PORT -> 0 if a ZooKeeper server answers "srvr"
	local host=${1%:*} port=${1##*:} out
	out=$(timeout 3 bash -c "exec 3<>/dev/tcp/$host/$port && printf srvr >&3 && cat <&3" 2>/dev/null)
	[[ $out == *Mode:* ]]
}

zk_up() {
	local d=/tmp/rg-zk zk
	if [ -n "${DXL_TEST_ZK:-}" ] && zk_ok "${DXL_TEST_ZK%%,*}"; then
		echo "$DXL_TEST_ZK"
		return 0
	fi
	if [ -f "$d/connect" ] && zk_ok "$(cat "$d/connect")"; then
		cat "$d/connect"
		return 0
	fi
	rm -rf "$d"
	zk=$("$RG_ROOT/scripts/zk.sh" start "$d") || { echo "zk_up: ZooKeeper did not start in the guest" >&2; return 1; }
	echo "$zk"
}

cluster_logs() {
	local f
	for f in /tmp/dxl-test-*/*/logs/*.log /tmp/dxl-test-*/*/cluster/logs/*.log; do
		[ -f "$f" ] || continue
		echo "----- $f (warnings and errors, then the last lines)"
		grep -E ' (warn|error) |level=(warn|error)' "$f" | tail -n 20
		echo "..."
		tail -n 8 "$f"
	done
}

dxl_tests() { # NAME|GLOB...
	local b=${DXL_BUILD:-build} tdir pat f names=() missing=()
	[ "${b:0:1}" = / ] || b=$RG_ROOT/$b
	tdir=$b/tests
	for pat in "$@"; do
		local found=0
		for f in "$tdir"/$pat; do
			[ -f "$f" ] && [ -x "$f" ] || continue
			names+=("$(basename "$f")"); found=1
		done
		[ "$found" = 1 ] || missing+=("$pat")
	done
	[ ${#missing[@]} -gt 0 ] && echo "dxl_tests: not built (skipped): ${missing[*]}"
	[ ${#names[@]} -gt 0 ] || { echo "dxl_tests: none of '$*' is built in $tdir"; return 1; }
	"$RG_ROOT/scripts/run-tests.sh" "$tdir" "${names[@]}"
}
export -f wait_listen pair check_gid1 ext4_scratch zk_ok zk_up cluster_logs dxl_tests

cd "$RG_CWD" || { echo "guest-run: cannot cd to $RG_CWD" >&2; cd /; }
mkdir -p "$dir/res"
n=0
while IFS= read -r line || [ -n "$line" ]; do
	n=$((n + 1))
	f=$(printf '%s/res/%03d' "$dir" "$n")
	printf '%s\n' "$line" > "$f.cmd"
	start=$(date +%s.%N)
	# timeout makes its own process group; after the command, kill whatever
	# of that group is left (background servers, hung clients).
	timeout -k 5 "$RG_CMD_TIMEOUT" bash -c "$line" > "$f.out" 2> "$f.err" < /dev/null &
	pid=$!
	wait "$pid"
	rc=$?
	kill -KILL -- "-$pid" 2>/dev/null
	end=$(date +%s.%N)
	[ "$rc" -eq 124 ] && echo "guest-run: killed after ${RG_CMD_TIMEOUT}s" >> "$f.err"
	awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f\n", b - a }' > "$f.secs"
	echo "$rc" > "$f.rc"
done < "$dir/cmds"
echo "$n" > "$dir/res/finished"
