#!/usr/bin/env bash
# Installs what fperf's build and tests need on a fresh Debian machine (run as root).
# Idempotent: packages already present are left alone.
set -euo pipefail

packages=(
  iproute2      # ip netns / veth for the network-namespace tests
  nftables      # packet-loss injection in the network-namespace tests
  libclang-dev  # bindgen, for the libfabric bindings
  clang
  libfabric-dev # libfabric headers (fperf loads the library at run time)
  libfabric-bin # fi_info, and the library itself for the ofi tests
  pkg-config
  # The Soft-RoCE VM (scripts/softroce/run.sh, tests/softroce_vm.rs); it fetches the
  # kernel package itself.
  qemu-system-x86
  busybox-static
  kmod
  cpio
  ibverbs-utils
  rdmacm-utils
  cmake         # sideway's rdma-mummy-sys (libibverbs/librdmacm loaded at run time)
  python3       # bench/compare and its tests
  iperf3        # tests/iperf3.rs: unmodified iperf3 clients against an fperf server
)

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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: cargo not found: install a Rust toolchain (rustup)" >&2; exit 1; }
