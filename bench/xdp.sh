#!/usr/bin/env bash
# UDP over AF_XDP against the kernel's UDP on the same veth pair between two network
# namespaces, alternating within each round: ping-pong of 64-byte datagrams (p50, p99),
# with and without --busy-poll, and bulk 1472-byte datagrams unpaced (datagrams per
# second the server received). AF_XDP at both ends (fperf -s --xdp, fperf -c --xdp)
# against the kernel at both ends. Root. Prints one line per run and a table of medians
# with AF_XDP/kernel ratios.
#
#   bench/xdp.sh [ROUNDS [SECONDS]]      (default 3 rounds of 3 s per run)
#   FPERF=target/debug/fperf bench/xdp.sh 1 2
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
secs="${2:-3}"
fperf="$(realpath "${FPERF:-target/release/fperf}")"
out=bench/out/xdp
mkdir -p "$out"
runs="$out/runs.txt"
: >"$runs"

s=xd-bench-s c=xd-bench-c sdev=xdbs0 cdev=xdbc0
cleanup() {
  [ -n "${pids:-}" ] && kill $pids 2>/dev/null || true
  ip netns del "$s" 2>/dev/null || true
  ip netns del "$c" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$s"
ip netns add "$c"
ip link add "$sdev" netns "$s" type veth peer name "$cdev" netns "$c"
ip -n "$s" addr add 10.97.0.1/24 dev "$sdev"
ip -n "$c" addr add 10.97.0.2/24 dev "$cdev"
for n in "$s" "$c"; do ip -n "$n" link set lo up; done
ip -n "$s" link set "$sdev" up
ip -n "$c" link set "$cdev" up
# A kernel UDP sender on veth leaves the UDP checksum to an offload that never runs;
# an AF_XDP receiver reads the frame as it is (see docs/xdp.md).
ip netns exec "$s" ethtool -K "$sdev" tx off >/dev/null
ip netns exec "$c" ethtool -K "$cdev" tx off >/dev/null

ip netns exec "$s" "$fperf" -s -p 15201 >/dev/null 2>&1 &
pids="$!"
ip netns exec "$s" "$fperf" -s -p 16201 --xdp "$sdev" >/dev/null 2>&1 &
pids="$pids $!"
sleep 1

# What one client run's report says: NAME PATH and its figures.
parse=$(cat <<'EOF'
import re, sys
name, path = sys.argv[1:3]
text = sys.stdin.read()
def us(key):
    m = re.search(r"^mprtt\s*:.*?\b%s=([\d.]+)us" % key, text, re.M)
    return m and float(m.group(1))
if name.startswith("pingpong"):
    print(name, path, us("p50"), us("p99"))
else:
    m = re.search(r"^server\s*:.*? in ([\d.]+)s .*?lost (\d+) of (\d+)", text, re.M)
    secs, lost, sent = float(m.group(1)), int(m.group(2)), int(m.group(3))
    print(name, path, round((sent - lost) / secs), round(lost / max(sent, 1) * 100, 2))
EOF
)

# run NAME PATH ARGS...: one client run; appends "NAME PATH value..." to $runs.
run() {
  local name=$1 path=$2
  shift 2
  local port=15201 xdp=()
  if [ "$path" = af_xdp ]; then port=16201 xdp=(--xdp "$cdev"); fi
  local text
  text=$(ip netns exec "$c" "$fperf" -c 10.97.0.1 -p "$port" -u "${xdp[@]}" "$@" 2>&1) || {
    echo "$name $path failed: $text" >&2
    return 0
  }
  local line
  line=$(python3 -c "$parse" "$name" "$path" <<<"$text")
  echo "$line" | tee -a "$runs"
}

for round in $(seq 1 "$rounds"); do
  echo "round $round" >&2
  for path in kernel af_xdp; do
    run pingpong_64 "$path" -r -l 64 --time "$secs"
    run pingpong_64_busy "$path" -r -l 64 --time "$secs" --busy-poll
    run bulk_1472 "$path" -l 1472 --time "$secs"
  done
done

python3 - "$runs" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    w = line.split()
    if len(w) < 4 or "None" in w:
        continue
    rows.setdefault((w[0], w[1]), []).append([float(x) for x in w[2:]])
def med(key, i):
    vals = [r[i] for r in rows.get(key, [])]
    return statistics.median(vals) if vals else None
print("| workload | figure | kernel UDP | AF_XDP | AF_XDP / kernel |")
print("|---|---|---|---|---|")
for name, figs in [("pingpong_64", ["p50 us", "p99 us"]),
                   ("pingpong_64_busy", ["p50 us", "p99 us"]),
                   ("bulk_1472", ["datagrams/s received", "loss %"])]:
    for i, fig in enumerate(figs):
        k, x = med((name, "kernel"), i), med((name, "af_xdp"), i)
        ratio = f"{x / k:.2f}" if k and x is not None else "-"
        print(f"| {name} | {fig} | {k} | {x} | {ratio} |")
EOF
