#!/usr/bin/env bash
# Installs what fperf needs on a Debian machine (as root; packages already present are
# left alone):
#   scripts/setup.sh           what building fperf needs, beside a Rust toolchain
#   scripts/setup.sh --tests   that, and what the test suite needs (scripts/test.sh)
set -euo pipefail

build=(
  gcc libc6-dev  # Rust's linker, and the C compiler the two items below use
  libclang-dev   # bindgen reads the libfabric headers with libclang
  libfabric-dev  # the libfabric headers (fperf loads the library at run time)
  cmake make     # sideway (RDMA verbs) builds its shims; libibverbs and librdmacm are
                 # loaded at run time
)
tests=(
  iproute2       # ip netns / veth for the network-namespace tests
  nftables       # packet-loss injection in the network-namespace tests
  ethtool        # tests/netns_xdp.rs: checksum offload off on the veths
  iputils-ping   # tests/netns_xdp.rs: a ping beside an AF_XDP run
  libfabric-bin  # fi_info, and the library itself for the libfabric tests
  # The Soft-RoCE VM (scripts/softroce/run.sh, tests/softroce_vm.rs); it fetches the
  # kernel package itself.
  qemu-system-x86
  busybox-static
  kmod
  cpio
  ibverbs-utils
  rdmacm-utils
  python3        # bench/compare and its tests
  iperf3         # tests/iperf3.rs: unmodified iperf3 clients against an fperf server
  curl xz-utils  # scripts/iperf3-current.sh fetches a current iperf3 from Debian 13
  # The package check (scripts/package-check.sh): the installed copy's man page,
  # completions and service unit, and the container image, made without a registry.
  dpkg-dev       # dpkg-shlibdeps, which the package's library dependencies come from
  man-db
  systemd
  zsh
  fish
  buildah
  mmdebstrap
  prometheus     # tests/exporter.rs: promtool, and a Prometheus server the test starts
  # scripts/slurm-check.sh: a single-node Slurm, started by the check, for the batch
  # script in deploy/slurm/.
  slurm-wlm
  munge
  python3-venv   # scripts/k8s-check.sh installs kubernetes-validate into a venv
)

case "${1:-}" in
  "") packages=("${build[@]}") ;;
  --tests) packages=("${build[@]}" "${tests[@]}") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Packages with a service (prometheus, slurm-wlm, munge) would start it: the tests
  # start their own, on loopback, for as long as they need it. policy-rc.d tells the
  # packages not to.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: cargo not found: install a Rust toolchain (rustup)" >&2; exit 1; }
