#!/usr/bin/env bash
# fperf's RDMA paths side by side with perftest (ib_send_bw, ib_write_bw, ib_send_lat,
# ib_write_lat), libfabric's fi_pingpong and librdmacm's rstream (rsockets' own
# benchmark, against fperf's rsocket rows), inside one boot of the Soft-RoCE VM of
# scripts/softroce/run.sh: both ends of every run in the VM, over rxe0. Every round runs
# every row once; within a workload the rows alternate (fperf, peer, fperf, peer, ...),
# top to bottom in odd rounds and bottom to top in even ones. Prints a table of medians
# over the rounds and fperf/peer ratios with their per-round range.
#
#   bench/rdma.sh [--rounds N] [--time SECS] [--lat-iters N] [--only W1,W2] [--no-pin]
#                 [--fperf PATH]
#
# Every tool's client runs on the VM's vCPU 0 and its server on vCPU 1 (fperf --cpu 0
# --server-cpu 1, the peers under taskset); --no-pin leaves placement to the scheduler.
# --lat-iters is the round trips of each perftest and rstream latency run (fi_pingpong's:
# a fifth); by default 30000 per second of --time, about as many as fperf makes in its
# time here, so that both tools' medians cover the same span.
#
# Workloads: send_64k send_1m write_64k write_1m (bandwidth), send_lat_2 send_lat_64
# write_lat_2 write_lat_64 (round trips). Needs what run.sh needs (QEMU, a Debian kernel
# package) plus perftest, libfabric-bin and rdmacm-utils (installed with apt-get if
# missing, as root).
# The VM's raw output goes to bench/out/rdma-DATE.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
secs=2
lat_iters=""
only=""
fperf=target/release/fperf
pin=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --time) secs="$2"; shift 2 ;;
    --lat-iters) lat_iters="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --fperf) fperf="$2"; shift 2 ;;
    --no-pin) pin=0; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "usage: bench/rdma.sh [--rounds N] [--time SECS] [--lat-iters N] [--only W1,W2] [--no-pin] [--fperf PATH]" >&2; exit 2 ;;
  esac
done
[ -n "$lat_iters" ] || lat_iters=$((30000 * ${secs//[!0-9]/0}))
case "$rounds$secs$lat_iters" in *[!0-9]*) echo "bench/rdma.sh: --rounds, --time and --lat-iters take whole numbers" >&2; exit 2 ;; esac

peers=(ib_send_bw ib_write_bw ib_send_lat ib_write_lat fi_pingpong rstream)
missing=()
command -v ib_send_bw >/dev/null || missing+=(perftest)
command -v fi_pingpong >/dev/null || missing+=(libfabric-bin)
command -v rstream >/dev/null || missing+=(rdmacm-utils)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "bench/rdma.sh: install ${missing[*]} (apt-get)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -x "$fperf" ] || { echo "bench/rdma.sh: no fperf at $fperf (cargo build --release)" >&2; exit 1; }

mkdir -p bench/out
stamp="$(date -u +%Y%m%d-%H%M%S)"
raw="bench/out/rdma-$stamp.txt"
script="$(mktemp)"
trap 'rm -f "$script"' EXIT

# The rows: workload|contender|how (fperf ARGS, or a peer's command line without the
# server address). A contender whose name starts with "fperf" is fperf.
rows() {
  local t=$secs n=$lat_iters s
  for s in 64k 1m; do
    # perftest's -D gives 0 for 1 MiB messages at Soft-RoCE's rate: those runs count
    # messages instead, about as many as fperf sends in the same time.
    local b=65536 len="-D $t"
    [ $s = 1m ] && b=1048576 len="-n $((30 * t))"
    # The peers leave their start out: perftest's -D measures between margins of 2 s,
    # its -n starts once both ends have posted their receives and shaken hands, and
    # rstream starts once an exchange has gone both ways. fperf's client starts its
    # clock while the server's threads are still starting, so fperf's bandwidth rows
    # leave their first second out (--omit).
    local span="--time $((t + 1)) --omit 1"
    cat <<EOF
send_$s|fperf ibverbs|-R -l $b $span
send_$s|ib_send_bw|ib_send_bw -s $b $len
send_$s|fperf cm|-R --rdma-api cm -l $b $span
send_$s|ib_send_bw -R|ib_send_bw -R -s $b $len
send_$s|fperf rsocket|-R --rdma-api rsocket -l $b $span
send_$s|rstream|rstream -S $b -C $(( (b == 65536 ? 500 : 40) * t )) -I 1
write_$s|fperf --rdma-write|-R --rdma-write -l $b $span
write_$s|ib_write_bw|ib_write_bw -s $b $len
EOF
  done
  for s in 2 64; do
    cat <<EOF
send_lat_$s|fperf ibverbs -r|-R -r -l $s --time $t
send_lat_$s|ib_send_lat|ib_send_lat -s $s -n $n
send_lat_$s|fperf cm -r|-R --rdma-api cm -r -l $s --time $t
send_lat_$s|ib_send_lat -R|ib_send_lat -R -s $s -n $n
send_lat_$s|fperf rsocket -r|-R --rdma-api rsocket -r -l $s --time $t
send_lat_$s|rstream|rstream -S $s -C 1 -I $n
send_lat_$s|fperf ofi -r|-R --rdma-api ofi --ofi-provider verbs -r -l $s --time $t
send_lat_$s|fi_pingpong|fi_pingpong -p verbs -e rdm -S $s -I $((n / 5))
write_lat_$s|fperf --rdma-write -r|-R --rdma-write -r -l $s --time $t
write_lat_$s|ib_write_lat|ib_write_lat -s $s -n $n
EOF
  done
}
rowlist="$(rows)"
if [ -n "$only" ]; then
  rowlist="$(grep -E "^(${only//,/|})\|" <<<"$rowlist" || true)"
  [ -n "$rowlist" ] || { echo "bench/rdma.sh: no workload matches --only $only" >&2; exit 2; }
fi
nrows="$(wc -l <<<"$rowlist")"

# The script the VM runs (busybox sh). Every run gets its own ports and a time-out; a
# run's output is framed by "@@ run ROUND|WORKLOAD|CONTENDER" and "@@ rc N".
{
  cat <<'EOF'
# libfabric's rxm sizes its verbs CQ as (tx + rx queue) x universe size (256): past rxe's
# limit unless the universe is small.
export FI_UNIVERSE_SIZE=64
port=20000
listening() { netstat -ltn 2>/dev/null | grep -q ":$1 "; }
wait_port() {
  i=0
  until listening "$1"; do i=$((i + 1)); [ $i -lt 50 ] || return 0; sleep 0.1; done
}
run_row() {
  round=$1 w=$2 c=$3 how=$4
  port=$((port + 10))
  echo "@@ run $round|$w|$c"
  case "$c" in
    fperf*)
      timeout 60 fperf -s -p $port >/tmp/server.out 2>&1 &
      srv=$!
      wait_port $port
      # shellcheck disable=SC2086
      timeout 60 fperf -c "$VM_IP" -p $port --json $fperf_pin $how >/tmp/client.out 2>&1
      ;;
    rstream*)
      # rsockets listen in rdma_cm's port space: no TCP port to wait for.
      # shellcheck disable=SC2086
      timeout 60 $server_pin $how -p $port >/tmp/server.out 2>&1 &
      srv=$!
      sleep 1
      # shellcheck disable=SC2086
      timeout 60 $client_pin $how -s "$VM_IP" -p $port >/tmp/client.out 2>&1
      ;;
    fi_pingpong*)
      # shellcheck disable=SC2086
      timeout 60 $server_pin $how -B $port >/tmp/server.out 2>&1 &
      srv=$!
      wait_port $port
      # shellcheck disable=SC2086
      timeout 60 $client_pin $how -P $port "$VM_IP" >/tmp/client.out 2>&1
      ;;
    *)
      # shellcheck disable=SC2086
      timeout 60 $server_pin $how -d rxe0 -F -p $port --report_gbits >/tmp/server.out 2>&1 &
      srv=$!
      case "$how" in *" -R "*) sleep 1 ;; *) wait_port $port ;; esac
      # shellcheck disable=SC2086
      timeout 60 $client_pin $how -d rxe0 -F -p $port --report_gbits "$VM_IP" >/tmp/client.out 2>&1
      ;;
  esac
  rc=$?
  cat /tmp/client.out
  i=0
  while kill -0 $srv 2>/dev/null && [ $i -lt 30 ]; do i=$((i + 1)); sleep 0.1; done
  kill $srv 2>/dev/null
  wait $srv 2>/dev/null
  echo "@@ rc $rc"
}
EOF
  echo "rounds=$rounds"
  if [ "$pin" = 1 ]; then
    echo "fperf_pin='--cpu 0 --server-cpu 1' client_pin='taskset -c 0' server_pin='taskset -c 1'"
  else
    echo "fperf_pin='' client_pin='' server_pin=''"
  fi
  echo "cat >/tmp/rows <<'ROWS'"
  echo "$rowlist"
  echo "ROWS"
  cat <<'EOF'
r=1
while [ $r -le $rounds ]; do
  echo "@@ round $r uptime $(cut -d' ' -f1 /proc/uptime)"
  if [ $((r % 2)) = 1 ]; then cp /tmp/rows /tmp/order; else
    # Bottom to top within each workload, workloads in the same order.
    : >/tmp/order
    for w in $(cut -d'|' -f1 /tmp/rows | uniq); do grep "^$w|" /tmp/rows | tac >>/tmp/order; done
  fi
  while IFS='|' read -r w c how; do run_row $r "$w" "$c" "$how"; done </tmp/order
  r=$((r + 1))
done
echo "@@ end uptime $(cut -d' ' -f1 /proc/uptime)"
EOF
} >"$script"

# About 5 s a run under software emulation on a shared host, plus the boot.
limit=$((60 + rounds * nrows * (secs + 6)))
adds=()
for p in "${peers[@]}"; do adds+=(--add "$(command -v "$p")"); done
echo "bench/rdma.sh: $rounds rounds x $nrows runs, ${secs} s each (VM time-out ${limit} s); raw output: $raw" >&2
started=$SECONDS
status=0
scripts/softroce/run.sh --fperf "$fperf" "${adds[@]}" --timeout "$limit" "$script" >"$raw" || status=$?
echo "bench/rdma.sh: the VM ran for $((SECONDS - started)) s, status $status" >&2
[ "$status" = 0 ] || { tail -n 30 "$raw" >&2; exit "$status"; }

{
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet -- src 2>/dev/null || echo ' (src modified)')"
  echo "host: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rounds: $rounds, $secs s per bandwidth run, fperf latency runs $secs s, perftest latency runs $lat_iters iterations, fi_pingpong $((lat_iters / 5))"
  if [ "$pin" = 1 ]; then echo "placement: every client on vCPU 0, every server on vCPU 1"; else echo "placement: the VM's scheduler (--no-pin)"; fi
} >>"$raw"
python3 bench/rdma_table.py "$raw"
