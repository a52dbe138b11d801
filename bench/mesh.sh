#!/usr/bin/env bash
# The wall time of an all-pairs `fperf mesh` against the ideal (rounds × test time),
# for meshes of network namespaces on one bridge, each host's link shaped by tbf so
# that the hosts' tests do not compete for this machine's CPUs. Needs root, ip and tc.
# Usage: bench/mesh.sh [--sizes "4 8 16"] [--time SECS] [--rate MBIT] [FPERF_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
sizes="4 8 16"
secs=1
mbit=200
bin=target/release/fperf
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --time) secs="$2"; shift 2 ;;
    --rate) mbit="$2"; shift 2 ;;
    -*) echo "usage: bench/mesh.sh [--sizes \"4 8 16\"] [--time SECS] [--rate MBIT] [FPERF]" >&2; exit 2 ;;
    *) bin="$1"; shift ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench/mesh.sh: needs root (network namespaces)" >&2; exit 1; }
bin="$(realpath "$bin")"
prefix="fpb$$"
hub="$prefix-hub"
key="$(mktemp)"
echo "the bench's key" >"$key"
hosts=0

cleanup() {
  pkill -f -- "--auth-key $key" 2>/dev/null || true
  for i in $(seq 0 $((hosts - 1))); do ip netns del "$prefix-h$i" 2>/dev/null || true; done
  ip netns del "$hub" 2>/dev/null || true
  hosts=0
}
trap 'cleanup; rm -f "$key"' EXIT

# mesh N: N hosts on the hub's bridge, each serving; prints the mesh's JSON document.
mesh() {
  local n=$1 i ns
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" addr add 10.78.0.250/24 dev br0
  ip -n "$hub" link set br0 up
  hosts=$n
  for i in $(seq 0 $((n - 1))); do
    ns="$prefix-h$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$hub" link add "b$i" type veth peer name "v$i" netns "$ns"
    ip -n "$hub" link set "b$i" master br0 up
    ip -n "$ns" addr add "10.78.0.$((i + 1))/24" dev "v$i"
    ip -n "$ns" link set "v$i" up
    ip netns exec "$ns" tc qdisc add dev "v$i" root tbf rate "${mbit}mbit" burst 64kb latency 50ms
    ip netns exec "$hub" tc qdisc add dev "b$i" root tbf rate "${mbit}mbit" burst 64kb latency 50ms
    ip netns exec "$ns" "$bin" -s -B "10.78.0.$((i + 1))" --allow-mesh --auth-key "$key" >/dev/null 2>&1 &
  done
  sleep 1
  local list=()
  for i in $(seq 0 $((n - 1))); do list+=("10.78.0.$((i + 1))"); done
  ip netns exec "$hub" timeout 900 "$bin" mesh --json --auth-key "$key" --time "$secs" "${list[@]}" 2>/dev/null
  cleanup
}

echo "| hosts | pairs | rounds | ideal (rounds × ${secs} s) | wall | wall / ideal | pairs one at a time |"
echo "|---|---|---|---|---|---|---|"
for n in $sizes; do
  mesh "$n" | python3 -c '
import json, sys
d = json.load(sys.stdin)
secs = float(sys.argv[1])
pairs = len(d["pairs"])
failed = sum(1 for p in d["pairs"] if "error" in p)
rounds, wall, hosts = d["rounds"], d["elapsed_seconds"], len(d["hosts"])
ideal = rounds * secs
note = " (%d failed)" % failed if failed else ""
print("| %d | %d%s | %d | %.0f s | %.1f s | %.2f | %.0f s |"
      % (hosts, pairs, note, rounds, ideal, wall, wall / ideal, pairs * secs))
' "$secs"
done
