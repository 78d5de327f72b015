#!/usr/bin/env bash
# rdma-guest.sh -- run commands against REAL verbs (Soft-RoCE, rdma_rxe) in a
# throw-away QEMU guest (software emulation, TCG). The guest shares this
# machine's root file system read-only (9p) and chroots into it, so rdma-core,
# perftest and dxl's binaries run unchanged, with DXL_TEST_PROVIDER=verbs and
# DXL_TEST_ADDR=10.0.2.15 (the address of the guest's rxe0). See docs/rdma.md.
#
# Usage: scripts/rdma-guest.sh [OPTIONS] [-c LINE]... [--list FILE]... [-- CMD [ARG...]]
#   -c LINE          one shell command line (bash -c) to run in the guest
#   --list FILE      command lines from FILE, one per line ('#' comments)
#   -- CMD [ARG...]  one command with its arguments (must come last)
#   --timeout S      hard limit for the guest, boot included (default 480)
#   --cmd-timeout S  limit per command (default: --timeout minus 20)
#   --out DIR        keep the console log and each command's cmd/out/err/rc
#                    in DIR, and the files the commands wrote into $RG_FILES
#                    in DIR/files/ (otherwise everything is removed at exit)
#   --env NAME=VALUE extra environment for the commands (repeatable)
#   -q, --quiet      show the output of failed commands only
# All commands run in one guest, in order, from the current folder, as root,
# with `ulimit -l unlimited`; guest-run.sh's helpers (pair, wait_listen,
# check_gid1, dxl_tests) are available to them. DXL_*, CMOCKA_* and *SAN_OPTIONS
# are passed through (in DXL_TEST_ZK, 127.0.0.1 becomes 10.0.2.2, the host);
# DXL_TEST_REQUIRE_DEVICE=1 is set unless the host sets it (a missing rxe0
# fails dxl's tests instead of skipping them). RG_FILES names a writable
# folder on the scratch share for result files (kept with --out).
#
# Exit status: 0 every command exited 0; 1 a command failed, or the guest did
# not come up / timed out (the console log is shown); 2 usage; 77 skipped:
# QEMU cannot run here (a single "SKIPPED: rdma-guest: <why>" line).
#
# First run (as root on Debian) installs qemu-system-x86 busybox-static kmod
# perftest rdmacm-utils cpio iproute2 ibverbs-providers if missing, downloads
# Debian's kernel package (the version linux-image-amd64 depends on) and
# caches the kernel, its RDMA/virtio/9p modules and the initramfs under
# build/rdma-guest/<kernel version>/ (reused later; rebuilt when the kernel
# version or scripts/rdma-guest/* change).
# Environment: RDMA_GUEST_CACHE (cache folder), RDMA_GUEST_KVER (kernel ABI,
# e.g. 6.1.0-56-amd64, instead of asking apt-cache), RDMA_GUEST_MEM (MiB,
# default 1024), RDMA_GUEST_SMP (default 2), RDMA_GUEST_APPEND (more kernel
# parameters), RDMA_GUEST_QEMU (the QEMU binary), RDMA_GUEST_PVH=0 (boot the
# compressed bzImage instead of the faster uncompressed PVH kernel).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
here=$root/scripts/rdma-guest
runner=$root/tests/rdma/guest-run.sh
cache=${RDMA_GUEST_CACHE:-$root/build/rdma-guest}
mem=${RDMA_GUEST_MEM:-1024}
smp=${RDMA_GUEST_SMP:-2}
qemu=${RDMA_GUEST_QEMU:-qemu-system-x86_64}

limit=480 cmd_limit='' out='' quiet=0
cmds=() extra_env=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
say() { echo "rdma-guest: $*"; }
skip() { echo "SKIPPED: rdma-guest: $*"; exit 77; }
die() { echo "rdma-guest: $*" >&2; exit 1; }

add_list() { # FILE
	local l
	[ -r "$1" ] || { echo "rdma-guest: cannot read list $1" >&2; exit 2; }
	while IFS= read -r l || [ -n "$l" ]; do
		[[ $l =~ ^[[:space:]]*(#|$) ]] && continue
		cmds+=("$l")
	done < "$1"
}

while [ $# -gt 0 ]; do
	case $1 in
	--timeout) limit=${2:?}; shift 2 ;;
	--cmd-timeout) cmd_limit=${2:?}; shift 2 ;;
	--out) out=${2:?}; shift 2 ;;
	--list) add_list "${2:?}"; shift 2 ;;
	-c) cmds+=("${2:?}"); shift 2 ;;
	--env) [[ ${2:-} == *=* ]] || usage; extra_env+=("$2"); shift 2 ;;
	-q | --quiet) quiet=1; shift ;;
	-h | --help) usage ;;
	--) shift; [ $# -gt 0 ] && cmds+=("$(printf '%q ' "$@")"); break ;;
	*) echo "rdma-guest: unknown option $1" >&2; usage ;;
	esac
done
[ ${#cmds[@]} -gt 0 ] || usage
[[ $limit =~ ^[0-9]+$ ]] && [ "$limit" -ge 30 ] || { echo "rdma-guest: --timeout must be >= 30" >&2; exit 2; }
[ -z "$cmd_limit" ] && cmd_limit=$((limit - 20))
[[ $cmd_limit =~ ^[0-9]+$ ]] || usage

t0=$(date +%s.%N)
tmps=() qpid=
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2> /dev/null; then
		kill -TERM "$qpid" 2> /dev/null || true
		sleep 0.5
		kill -KILL "$qpid" 2> /dev/null || true
		wait "$qpid" 2> /dev/null || true
	fi
	[ ${#tmps[@]} -eq 0 ] || rm -rf "${tmps[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- packages
pkg_ok() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
need=(qemu-system-x86 busybox-static kmod cpio iproute2 ibverbs-providers perftest rdmacm-utils)
if command -v dpkg-query > /dev/null; then
	missing=()
	for p in "${need[@]}"; do pkg_ok "$p" || missing+=("$p"); done
	if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null; then
		log=$(mktemp)
		export DEBIAN_FRONTEND=noninteractive
		if ! { timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
			{ timeout 300 apt-get update -qq &&
				timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; } \
			< /dev/null > "$log" 2>&1; then
			tail -n 20 "$log" >&2; rm -f "$log"
			skip "cannot install ${missing[*]} (apt-get failed, output above)"
		fi
		rm -f "$log"
		say "installed ${missing[*]}"
	elif [ ${#missing[@]} -gt 0 ]; then
		# Without root: go on if the essentials are there (other packages
		# only matter to the commands that use them).
		for p in qemu-system-x86 busybox-static kmod cpio; do
			pkg_ok "$p" || skip "missing ${missing[*]} (as root: apt-get install --no-install-recommends ${missing[*]})"
		done
		say "warning: missing ${missing[*]}; commands that need them will fail"
	fi
fi
command -v "$qemu" > /dev/null || skip "no $qemu (Debian: qemu-system-x86)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && ! ldd "$busybox" > /dev/null 2>&1 ||
	skip "no statically linked busybox (Debian: busybox-static)"
for t in cpio depmod modprobe flock; do
	command -v "$t" > /dev/null || PATH=$PATH:/sbin:/usr/sbin command -v "$t" > /dev/null ||
		skip "no $t (Debian: cpio, kmod, util-linux)"
done
export PATH=$PATH:/usr/sbin:/sbin

# ---------------------------------------------------------------- kernel
kver=${RDMA_GUEST_KVER:-}
if [ -z "$kver" ]; then
	kver=$(apt-cache depends linux-image-amd64 2> /dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -n 1 || true)
fi
if [ -z "$kver" ] && [ -d "$cache" ]; then
	# No package lists: use the newest cached kernel, if any
	for d in "$cache"/[0-9]*-amd64; do
		[ -f "$d/initrd.gz" ] && kver=${d##*/}
	done
fi
[ -n "$kver" ] || skip "cannot tell the Debian kernel version (apt-cache depends linux-image-amd64 gave nothing; set RDMA_GUEST_KVER)"

mkdir -p "$cache"
kdir=$cache/$kver
exec 9> "$cache/.lock"
flock 9 # one cache builder at a time; concurrent runs wait here

# Key of the module set: the list of wanted modules. Key of the initramfs:
# that plus init.sh and busybox.
mods_key=$(sha256sum "$here/modules.list" | cut -c1-16)
init_key=$(cat "$here/modules.list" "$here/init.sh" "$busybox" | sha256sum | cut -c1-16)

build_modules() { # unpack the kernel package, pick the modules we need
	local deb tmp m f dst
	deb=$(ls "$kdir"/linux-image-"$kver"_*.deb 2> /dev/null | head -n 1 || true)
	if [ -z "$deb" ]; then
		say "downloading linux-image-$kver (about 70 MB, once)"
		local log; log=$(mktemp)
		mkdir -p "$kdir"
		if ! (cd "$kdir" && timeout 300 apt-get download -q "linux-image-$kver") > "$log" 2>&1; then
			if [ "$(id -u)" -eq 0 ] && timeout 300 apt-get update -qq > "$log" 2>&1 &&
				(cd "$kdir" && timeout 300 apt-get download -q "linux-image-$kver") > "$log" 2>&1; then
				:
			else
				cat "$log" >&2; rm -f "$log"
				skip "cannot download linux-image-$kver (apt-get download failed, output above)"
			fi
		fi
		rm -f "$log"
		deb=$(ls "$kdir"/linux-image-"$kver"_*.deb | head -n 1)
	fi
	tmp=$(mktemp -d "$cache/.unpack.XXXXXX")
	tmps+=("$tmp")
	dpkg-deb -x "$deb" "$tmp/root" || die "cannot unpack $deb"
	depmod -b "$tmp/root" "$kver" || die "depmod -b failed for $kver"
	rm -rf "$kdir/modules" "$kdir/modules.order" "$kdir/vmlinuz" "$kdir"/vmlinux.*
	mkdir -p "$kdir/modules"
	: > "$kdir/modules.order.new"
	while IFS= read -r m; do
		[[ $m =~ ^[[:space:]]*(#|$) ]] && continue
		local opt=
		[ "${m:0:1}" = '?' ] && { opt='?'; m=${m:1}; }
		local deps
		if ! deps=$(modprobe -d "$tmp/root" -S "$kver" --show-depends "$m" 2>&1); then
			[ -n "$opt" ] && continue
			die "kernel $kver has no module $m: $deps"
		fi
		while read -r kind f _; do
			[ "$kind" = insmod ] || continue # "builtin X": nothing to load
			dst=$(basename "$f"); dst=${dst%.xz}; dst=${dst%.zst}; dst=${dst%.gz}
			[ -e "$kdir/modules/$dst" ] && continue
			case $f in
			*.xz) xz -dc "$f" > "$kdir/modules/$dst" ;;
			*.zst) zstd -qdc "$f" > "$kdir/modules/$dst" ;;
			*.gz) gzip -dc "$f" > "$kdir/modules/$dst" ;;
			*) cp "$f" "$kdir/modules/$dst" ;;
			esac
			# dependencies of an optional module are required only by it
			echo "$opt$dst" >> "$kdir/modules.order.new"
		done <<< "$deps"
	done < "$here/modules.list"
	cp "$tmp/root/boot/vmlinuz-$kver" "$kdir/vmlinuz"
	mv "$kdir/modules.order.new" "$kdir/modules.order"
	echo "$mods_key" > "$kdir/modules.key"
	rm -rf "$tmp"
}

build_initrd() {
	local tmp
	tmp=$(mktemp -d "$cache/.initrd.XXXXXX")
	tmps+=("$tmp")
	mkdir -p "$tmp/bin" "$tmp/modules"
	cp "$busybox" "$tmp/bin/busybox"
	cp "$here/init.sh" "$tmp/init"
	chmod 755 "$tmp/init" "$tmp/bin/busybox"
	cp "$kdir"/modules/*.ko "$tmp/modules/"
	cp "$kdir/modules.order" "$tmp/modules.order"
	(cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) > "$kdir/initrd.gz.new"
	mv "$kdir/initrd.gz.new" "$kdir/initrd.gz"
	echo "$init_key" > "$kdir/initrd.key"
	rm -rf "$tmp"
}

if [ ! -f "$kdir/vmlinuz" ] || [ "$(cat "$kdir/modules.key" 2> /dev/null)" != "$mods_key" ]; then
	build_modules
fi
if [ ! -f "$kdir/initrd.gz" ] || [ "$(cat "$kdir/initrd.key" 2> /dev/null)" != "$init_key" ]; then
	build_initrd
	# Older kernels' caches are of no further use
	for d in "$cache"/*-amd64; do
		[ -d "$d" ] && [ "$d" != "$kdir" ] && rm -rf "$d"
	done
fi
# The uncompressed kernel with its PVH entry: boots about 4 s faster
if [ ! -f "$kdir/vmlinux.pvh" ] && [ ! -f "$kdir/vmlinux.nopvh" ]; then
	if command -v python3 > /dev/null &&
		python3 "$here/pvh-kernel.py" "$kdir/vmlinuz" "$kdir/vmlinux.new" 2> /dev/null; then
		mv "$kdir/vmlinux.new" "$kdir/vmlinux.pvh"
	else
		rm -f "$kdir/vmlinux.new"
		touch "$kdir/vmlinux.nopvh"
	fi
fi
flock -u 9

# ---------------------------------------------------------------- the run
run=$(mktemp -d /tmp/rdma-guest.XXXXXX)
tmps+=("$run")

s=$run/scratch
mkdir -p "$s/res" "$s/files"
cp "$runner" "$s/guest-run.sh"
printf '%s\n' "${cmds[@]}" > "$s/cmds"
echo "RG_TIMEOUT=$limit" > "$s/guest.conf" # only bounds an orphaned guest
{
	printf 'RG_CWD=%q\n' "$PWD"
	printf 'RG_CMD_TIMEOUT=%q\n' "$cmd_limit"
	printf 'RG_ROOT=%q\n' "$root"
} > "$s/conf"
{
	# defaults (the host's DXL_* values win), then the host's values, then
	# what the guest imposes, then --env
	envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		HOME=/tmp TMPDIR=/tmp LANG=C.UTF-8 TERM=dumb CMOCKA_MESSAGE_OUTPUT=stdout
		DXL_TEST_DEVICE=rxe0 DXL_TEST_GID_INDEX=1 DXL_TEST_WAIT_MS=30000
		DXL_TEST_REQUIRE_DEVICE=1)
	while IFS= read -r name; do
		envs+=("$name=${!name}")
	done < <(compgen -e | grep -E '^(DXL_|CMOCKA_)|^[A-Z]+SAN_OPTIONS$' || true)
	# RG_FILES: the scratch share's files/ as the guest sees it (init.sh
	# binds the share to /tmp/rdma-guest in the host root)
	envs+=(DXL_TEST_PROVIDER=verbs DXL_TEST_ADDR=10.0.2.15
		RG_FILES=/tmp/rdma-guest/files "${extra_env[@]}")
	for e in "${envs[@]}"; do
		name=${e%%=*} val=${e#*=}
		if [ "$name" = DXL_TEST_ZK ]; then
			val=${val//127.0.0.1/10.0.2.2}; val=${val//localhost/10.0.2.2}
		fi
		printf 'export %s=%q\n' "$name" "$val"
	done
} > "$s/env"

boot() { # KERNEL: run the guest; sets qrc and qsecs
	local tq
	rm -f "$run/console.log" "$run/qemu.out"
	local qemu_args=(
		-nodefaults -no-user-config -display none -no-reboot
		-accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem"
		-kernel "$1" -initrd "$kdir/initrd.gz"
		-append "console=ttyS0 panic=-1 quiet ${RDMA_GUEST_APPEND:-}"
		-serial "file:$run/console.log"
		-netdev user,id=n0 -device virtio-net-pci,netdev=n0
		-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
		-virtfs "local,path=$s,mount_tag=scratch,security_model=none,multidevs=remap"
	)
	tq=$(date +%s.%N)
	timeout -k 5 "$limit" "$qemu" "${qemu_args[@]}" < /dev/null > "$run/qemu.out" 2>&1 &
	qpid=$!
	set +e
	wait "$qpid"
	qrc=$?
	set -e
	qpid=
	qsecs=$(awk -v a="$tq" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# QEMU did not start at all: no stage file, no console output, exited early
qemu_failed() {
	[ ! -f "$s/stage" ] && [ "$qrc" -ne 0 ] && [ "$qrc" -ne 124 ] && [ "$qrc" -ne 137 ] &&
		[ ! -s "$run/console.log" ]
}

if [ "${RDMA_GUEST_PVH:-1}" != 0 ] && [ -f "$kdir/vmlinux.pvh" ]; then
	boot "$kdir/vmlinux.pvh"
	if qemu_failed; then # an older QEMU without PVH? Try the bzImage.
		pvh_err=$(head -n 1 "$run/qemu.out")
		boot "$kdir/vmlinuz"
		qemu_failed || say "warning: QEMU refused the PVH kernel ($pvh_err); booted the bzImage"
	fi
else
	boot "$kdir/vmlinuz"
fi

stage_time() { awk -v s="$1" '$1 == s { print $2; exit }' "$s/stage" 2> /dev/null; }
show_console() {
	echo "----- guest progress (step, uptime s): $(tr '\n' ' ' 2> /dev/null < "$s/stage")"
	echo "----- guest console:"
	if [ -s "$run/console.log" ]; then cat "$run/console.log"; else echo "(empty)"; fi
	if [ -s "$run/qemu.out" ]; then echo "----- qemu output:"; cat "$run/qemu.out"; fi
	if [ -s "$s/runner.log" ]; then echo "----- guest runner log:"; cat "$s/runner.log"; fi
	echo "-----"
}
keep() { # copy the results to --out DIR
	[ -n "$out" ] || return 0
	mkdir -p "$out"
	cp "$run/console.log" "$run/qemu.out" "$out/" 2> /dev/null || true
	cp -r "$s/res" "$s/stage" "$s/cmds" "$s/env" "$out/" 2> /dev/null || true
	mkdir -p "$out/files"
	cp -r "$s/files/." "$out/files/" 2> /dev/null || true
	[ -f "$s/runner.log" ] && cp "$s/runner.log" "$out/"
	return 0
}
keep

if [ ! -f "$s/stage" ]; then
	# The kernel never mounted the scratch share. If QEMU itself could not
	# start (no TCG, no 9p support, ...), this machine cannot run the test.
	if qemu_failed; then
		skip "QEMU cannot run here (exit $qrc): $(grep -v '^$' "$run/qemu.out" | head -n 1)"
	fi
	echo "rdma-guest: FAILED: the guest never came up (qemu exit $qrc after ${qsecs}s)" >&2
	show_console >&2
	exit 1
fi

# The commands' results
n=${#cmds[@]} passed=0 failed=0 failed_names=()
for ((i = 1; i <= n; i++)); do
	f=$(printf '%s/res/%03d' "$s" "$i")
	c=${cmds[$((i - 1))]}
	if [ ! -f "$f.rc" ]; then
		failed=$((failed + 1)); failed_names+=("[$i]")
		if [ -f "$f.cmd" ]; then
			echo "=== [$i] $c: DID NOT FINISH (guest stopped: time limit ${limit}s?)"
			cat "$f.out" "$f.err" 2> /dev/null
		else
			echo "=== [$i] $c: NOT RUN"
		fi
		continue
	fi
	rc=$(cat "$f.rc") secs=$(cat "$f.secs")
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		echo "=== [$i] $c: ok (${secs}s)"
		if [ "$quiet" = 0 ]; then cat "$f.out"; cat "$f.err"; fi
	else
		failed=$((failed + 1)); failed_names+=("[$i]")
		echo "=== [$i] $c: FAILED, exit $rc (${secs}s)"
		[ -s "$f.out" ] && { echo "--- stdout:"; cat "$f.out"; }
		[ -s "$f.err" ] && { echo "--- stderr:"; cat "$f.err"; }
	fi
done

up=$(stage_time run)
summary="$n commands: $passed passed, $failed failed (kernel $kver, guest ready at ${up:-?}s uptime, qemu ${qsecs}s, total $(elapsed)s)"
if grep -q '^failed' "$s/stage"; then
	echo "rdma-guest: FAILED: guest set-up: $(sed -n 's/^failed //p' "$s/stage")" >&2
	show_console >&2
	exit 1
fi
if [ ! -f "$s/res/finished" ]; then
	echo "rdma-guest: FAILED: the guest stopped before the commands finished (qemu exit $qrc after ${qsecs}s, limit ${limit}s)" >&2
	show_console >&2
	say "$summary"
	exit 1
fi
say "$summary"
if [ "$failed" -gt 0 ]; then
	say "failed: ${failed_names[*]}"
	exit 1
fi
exit 0
