#!/usr/bin/env bash
# User-space instructions per SEND round trip, fperf (ibverbs, -r) against ib_send_lat,
# counted by callgrind inside the Soft-RoCE VM of scripts/softroce/run.sh. A count moves
# far less with the host's load than a latency under emulation does, so it shows what
# each tool's own code costs per round trip.
#
#   bench/rdma_instructions.sh [--size BYTES] [--round-trips N] [--repeat R] [--fperf PATH]
#
# Each side of each tool runs under callgrind (on vCPU 0) while its peer runs natively
# (on vCPU 1), twice: N and 5N round trips. The difference of the two totals over 4N
# is the cost of one round trip, start-up and reports cancelling out. ib_send_lat sorts
# its samples once the run is over (qsort): that is left out, while fperf's histogram,
# filled as it goes, is counted.
# Polling while the peer answers is counted too, for both tools, and that depends on
# timing: so the pair of runs is repeated R times (default 3), and the table gives the
# median and the range.
# Needs what run.sh needs, plus valgrind and perftest (installed if missing, as root).
# The VM's raw output goes to bench/out/rdma-instructions-DATE.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
size=2
n=2000
repeat=3
fperf=target/release/fperf
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --round-trips) n="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --fperf) fperf="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "usage: bench/rdma_instructions.sh [--size BYTES] [--round-trips N] [--repeat R] [--fperf PATH]" >&2; exit 2 ;;
  esac
done
case "$size$n$repeat" in *[!0-9]*) echo "bench/rdma_instructions.sh: --size, --round-trips and --repeat take whole numbers" >&2; exit 2 ;; esac
missing=()
command -v ib_send_lat >/dev/null || missing+=(perftest)
command -v valgrind >/dev/null || missing+=(valgrind)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "bench/rdma_instructions.sh: install ${missing[*]} (apt-get)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -x "$fperf" ] || { echo "bench/rdma_instructions.sh: no fperf at $fperf (cargo build --release)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Without its debug information valgrind starts in seconds under emulation, not minutes;
# the symbols stay.
strip --strip-debug -o "$work/fperf" "$fperf"
vglib=/usr/libexec/valgrind
cat >"$work/vm.sh" <<EOF
size=$size
n=$n
repeat=$repeat
EOF
cat >>"$work/vm.sh" <<'EOF'
port=30000
listening() { netstat -ltn 2>/dev/null | grep -q ":$1 "; }
wait_port() { i=0; until listening "$1"; do i=$((i + 1)); [ $i -lt 100 ] || return 0; sleep 0.1; done; }
cg="taskset -c 0 valgrind.bin --tool=callgrind --compress-strings=no --callgrind-out-file=/tmp/cg.out"
# The run's total, and what its calls to qsort cost.
totals() {
  awk '/^summary:/ { s = $2 } /^fn=/ { q = 0 } /^cfn=/ { q = ($0 == "cfn=qsort") }
       /^calls=/ { if (q) { getline; sorted += $NF } } END { print s + 0, sorted + 0 }' /tmp/cg.out
}
measure() {
  side=$1 tool=$2 k=$3 r=$4
  port=$((port + 10))
  case "$tool/$side" in
    fperf/client)
      timeout 600 taskset -c 1 fperf -s -1 -p $port >/dev/null 2>&1 & srv=$!; wait_port $port
      $cg fperf -c "$VM_IP" -p $port -R -r -l $size --transactions $k -i 0 --connect-timeout 120000 >/dev/null 2>&1 ;;
    fperf/server)
      timeout 600 $cg fperf -s -1 -p $port >/dev/null 2>&1 & srv=$!; wait_port $port
      taskset -c 1 fperf -c "$VM_IP" -p $port -R -r -l $size --transactions $k -i 0 >/dev/null 2>&1 ;;
    ib_send_lat/client)
      timeout 600 taskset -c 1 ib_send_lat -d rxe0 -F -p $port -s $size -n $k >/dev/null 2>&1 & srv=$!; wait_port $port
      $cg ib_send_lat -d rxe0 -F -p $port -s $size -n $k "$VM_IP" >/dev/null 2>&1 ;;
    ib_send_lat/server)
      timeout 600 $cg ib_send_lat -d rxe0 -F -p $port -s $size -n $k >/dev/null 2>&1 & srv=$!; wait_port $port
      taskset -c 1 ib_send_lat -d rxe0 -F -p $port -s $size -n $k "$VM_IP" >/dev/null 2>&1 ;;
  esac
  rc=$?
  wait $srv; rc2=$?
  echo "@@ $r $tool $side $k rc=$rc/$rc2 $(totals)"
  rm -f /tmp/cg.out
}
r=1
while [ $r -le $repeat ]; do
  for side in client server; do
    for tool in fperf ib_send_lat; do
      measure $side $tool $n $r
      measure $side $tool $((5 * n)) $r
    done
  done
  r=$((r + 1))
done
EOF

adds=(--add "$(command -v ib_send_lat)" --add "$(command -v valgrind).bin"
  --add "$vglib/callgrind-amd64-linux" --add "$vglib/vgpreload_core-amd64-linux.so"
  --add "$vglib/default.supp")
mkdir -p bench/out
raw="bench/out/rdma-instructions-$(date -u +%Y%m%d-%H%M%S).txt"
scripts/softroce/run.sh --fperf "$work/fperf" "${adds[@]}" --timeout $((300 + 400 * repeat)) "$work/vm.sh" >"$raw" || {
  tail -n 30 "$raw" >&2
  exit 1
}
python3 bench/rdma_instructions.py "$size" "$n" <"$raw"
