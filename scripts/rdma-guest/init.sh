#!/bin/busybox sh
# init.sh -- /init of the Soft-RoCE test guest (the initramfs built by
# scripts/rdma-guest.sh; see docs/rdma.md).
#
# Loads the modules listed in /modules.order (crc32 before rdma_rxe), mounts
# the scratch share (tag "scratch", writable) and the host's root (tag
# "hostroot", read-only), brings up lo and eth0 (10.0.2.15/24), adds the
# Soft-RoCE device rxe0 on eth0, waits until its port is ACTIVE with an
# IPv4-mapped GID at index 1, then runs the command runner chrooted into the
# host root and powers off. Progress goes to /scratch/stage (one line per
# step, "<step> <uptime>"), so the host can tell how far the guest got; every
# failure is written to the console (the host shows it) before power-off.

/bin/busybox mkdir -p /bin /proc /sys /dev /scratch /host
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

say() { echo "rdma-guest(init): $*"; }
stage() {
	read -r up _ < /proc/uptime
	[ -d /scratch/res ] && echo "$1 $up" >> /scratch/stage
}
die() {
	say "FAILED: $*"
	say "last kernel messages:"
	dmesg | tail -n 40
	[ -d /scratch/res ] && echo "failed $*" >> /scratch/stage
	sync
	poweroff -f
	sleep 5 # poweroff -f does not return; never let PID 1 exit
}

# 1. Modules, in the order the host computed (dependencies first).
while read -r mod; do
	case $mod in
	'?'*) insmod "/modules/${mod#?}" 2>/dev/null || say "warning: optional module ${mod#?} did not load" ;;
	*) insmod "/modules/$mod" || die "insmod $mod" ;;
	esac
done < /modules.order

# 2. The shares. The scratch share holds the run's configuration (guest.conf,
# written by the host), the commands and the results.
p9=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$p9" scratch /scratch || die "mount of the scratch share (9p tag scratch)"
[ -d /scratch/res ] || die "the scratch share has no res/ folder (not made by rdma-guest.sh?)"
stage booted
RG_TIMEOUT=600
. /scratch/guest.conf
# Guest-side watchdog: the host's `timeout` around QEMU is the real limit;
# this one only bounds a guest whose host-side `timeout` was killed.
( sleep "$RG_TIMEOUT"; say "guest watchdog: ${RG_TIMEOUT}s elapsed, powering off"; poweroff -f ) &

mount -t 9p -o "$p9,ro,cache=loose" hostroot /host || die "mount of the host root (9p tag hostroot)"
mount -o bind /dev /host/dev || die "bind /dev"
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
mount -t proc proc /host/proc || die "mount /proc in the host root"
mount -t sysfs sysfs /host/sys || die "mount /sys in the host root"
# A working folder (the source tree, with build/) below a folder the guest
# covers with a tmpfs here would vanish (a clone in /tmp, as CI may use):
# hold it with a bind mount first and put it back on top afterwards. (A 9p
# virtio device has one channel: the host root cannot be mounted twice.)
RG_CWD=$(sed -n 's/^RG_CWD=//p' /scratch/conf 2>/dev/null) # written by the host
case "$RG_CWD" in
/tmp/* | /run/* | /var/tmp/*)
	mkdir -p /keep
	mount -o bind "/host$RG_CWD" /keep ||
		die "hold the working folder $RG_CWD"
	;;
*) RG_CWD= ;;
esac
mount -t tmpfs -o mode=1777 tmpfs /host/tmp || die "tmpfs on /tmp"
mount -t tmpfs -o mode=755 tmpfs /host/run
[ -d /host/var/tmp ] && mount -t tmpfs -o mode=1777 tmpfs /host/var/tmp
if [ -n "$RG_CWD" ]; then
	mkdir -p "/host$RG_CWD"
	mount -o bind /keep "/host$RG_CWD" ||
		die "put the working folder $RG_CWD back over the guest's tmpfs"
fi
mkdir -p /host/tmp/rdma-guest
mount -o bind /scratch /host/tmp/rdma-guest || die "bind the scratch share into the host root"
stage mounted

# 3. Network: slirp's default guest address, static (no DHCP client needed).
ip link set lo up || die "ip link set lo up"
[ -e /sys/class/net/eth0 ] || die "no eth0 (virtio_net did not find the NIC)"
ip addr add 10.0.2.15/24 dev eth0 || die "ip addr add 10.0.2.15/24 dev eth0"
ip link set eth0 up || die "ip link set eth0 up"
ip route add default via 10.0.2.2 dev eth0 2>/dev/null
hostname rdma-guest
stage network

# 4. Soft-RoCE: rxe0 on eth0 (the host's iproute2 `rdma` tool, via chroot).
chroot /host /usr/bin/env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0 type rxe netdev eth0"
port=/sys/class/infiniband/rxe0/ports/1
i=0
while :; do
	state=$(cat "$port/state" 2>/dev/null)
	gid1=$(cat "$port/gids/1" 2>/dev/null)
	case "$state/$gid1" in
	*ACTIVE/0000:0000:0000:0000:0000:ffff:*) break ;;
	esac
	i=$((i + 1))
	[ $i -gt 100 ] && die "rxe0 port 1 not ACTIVE with an IPv4 GID at index 1 after 10 s (state '$state', gid1 '$gid1')"
	sleep 0.1
done
stage rxe

# 5. The commands, chrooted into the host root (the runner is a copy the host
# put into the scratch share; it reads cmds/env/conf there).
stage run
chroot /host /usr/bin/env -i /bin/bash /tmp/rdma-guest/guest-run.sh /tmp/rdma-guest > /scratch/runner.log 2>&1
echo "runner-exit $?" >> /scratch/stage
stage "done"
sync
poweroff -f
sleep 5
