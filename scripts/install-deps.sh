#!/usr/bin/env bash
# install-deps.sh -- install what dxl needs to build, test and run, if missing.
#
# On Debian 12 as root: apt-get installs every missing package (idempotent;
# does nothing when all are present). Elsewhere: prints exactly what to
# install and exits 1. Usage: scripts/install-deps.sh [--rdma-test]
#   --rdma-test  also the packages of the Soft-RoCE guest test (QEMU, ...)
set -euo pipefail

PKGS=(
	build-essential pkg-config python3 procps
	clang libclang-rt-14-dev                               # libFuzzer (make fuzz)
	libibverbs-dev librdmacm-dev rdma-core ibverbs-utils  # RDMA verbs provider
	libpmem2-dev                                           # persistent memory
	libzookeeper-mt-dev zookeeper                          # membership (C client, server)
	libcmocka-dev                                          # unit tests
	libinih-dev                                            # config files
	libjansson-dev                                         # JSON (bench results, CLI)
	libisal-dev                                            # CRC32C of log records
	etcd-server                                            # the SmallBank peer (scripts/etcd.sh)
)
RDMA_TEST_PKGS=(qemu-system-x86 busybox-static kmod perftest rdmacm-utils cpio iproute2 ibverbs-providers)

[ "${1:-}" = "--rdma-test" ] && PKGS+=("${RDMA_TEST_PKGS[@]}")

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
# ZooKeeper's server needs a Java runtime; the zookeeper package pulls one in
# on a bare Debian, but check so a half-installed machine is caught.
if ! command -v java >/dev/null 2>&1; then
	missing+=(default-jre-headless)
fi

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

if [ ! -f /etc/debian_version ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: not a Debian system. Install the equivalents of:" >&2
	echo "  ${missing[*]}" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing packages; as root run:" >&2
	echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
