#!/usr/bin/env bash
# Puts the many-core rows' peers into bench/out/peers/bin, for a machine that cannot
# install them (one with no network): iperf3 built from a source checkout and linked
# statically (3.16 and later run a thread per stream; Debian 12 packages 3.12), and
# Debian's iperf2. Then carry target/release/fperf and bench/out/peers there and run
# bench/compare with that directory first on the PATH (bench/README.md, "Many cores").
#
#   bench/peers.sh IPERF3_SOURCE    # a checkout of https://github.com/esnet/iperf
set -euo pipefail

if [ $# -ne 1 ] || [ ! -f "$1/configure" ]; then
  echo "usage: bench/peers.sh IPERF3_SOURCE (a checkout of esnet/iperf, 3.16 or later)" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
src=$(cd "$1" && pwd)
out="$repo/bench/out/peers"
build="$repo/bench/out/peers-build"
mkdir -p "$out/bin"

for tool in cc make; do
  command -v "$tool" >/dev/null || { echo "bench/peers.sh: needs $tool" >&2; exit 1; }
done
if ! command -v iperf >/dev/null; then
  apt-get install -y iperf >/dev/null
fi

# Built out of the source tree, which stays as it was.
rm -rf "$build" && mkdir -p "$build"
(cd "$build" && "$src/configure" --quiet --enable-static-bin --disable-shared \
    --without-openssl --without-sctp >/dev/null && make -j"$(nproc)" >/dev/null)
install -m 755 "$build/src/iperf3" "$out/bin/iperf3"
install -m 755 "$(command -v iperf)" "$out/bin/iperf"
rm -rf "$build"

"$out/bin/iperf3" --version | head -n 1
# iperf2 exits with 1 after printing its version.
{ "$out/bin/iperf" -v 2>&1 || true; } | head -n 1
if ldd "$out/bin/iperf3" >/dev/null 2>&1; then
  echo "bench/peers.sh: iperf3 is not static" >&2
  exit 1
fi
echo "peers in $out/bin"
