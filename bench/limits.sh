#!/bin/bash
# Peak and after-test resident memory, fds and threads of an fperf server with the
# default limits, under the largest tests those limits allow and a few they refuse
# (docs/limits.md). Loopback only. Usage: bench/limits.sh [FPERF_BINARY]
set -u
BIN=${1:-target/release/fperf}
port=20000
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

measure() {
  local name="$1"; shift
  port=$((port + 600)) # each test takes up to 256 data ports above its own
  "$BIN" -s -p "$port" >"$out/server" 2>&1 &
  local server=$!
  sleep 0.5
  local base; base=$(kib "$server" VmRSS)
  timeout 60 "$BIN" -c 127.0.0.1 -p "$port" "$@" >"$out/client" 2>&1
  local rc=$?
  sleep 1.5
  printf "%-36s rc=%s base=%s MiB peak=%s MiB after=%s MiB fds=%s threads=%s\n" \
    "$name" "$rc" "$(mib "$base")" "$(mib "$(kib "$server" VmHWM)")" \
    "$(mib "$(kib "$server" VmRSS)")" "$(ls "/proc/$server/fd" | wc -l)" \
    "$(kib "$server" Threads)"
  [ "$rc" -ne 0 ] && tail -1 "$out/client"
  kill "$server"
  wait "$server" 2>/dev/null
}

measure "-t 240 -i 0.512 -l 1" -t 240 -i 0.512 -l 1 --time 5
measure "-t 240 -i 0.512" -t 240 -i 0.512 --time 5
measure "-t 256" -t 256 --time 5
measure "-t 100 -l 1M" -t 100 -l 1048576 --time 5
measure "-u -t 64 -l 65000 -i 0.5" -u -t 64 -l 65000 -i 0.5 --time 5
measure "-u -t 256 -l 1400 -i 0.512" -u -t 256 -l 1400 -i 0.512 --time 5
measure "-u -t 256 -n 4 -l 1400" -u -t 256 -n 4 -l 1400 --time 5
measure "--reverse -t 90 -n 4" --reverse -t 90 -n 4 --time 5
measure "--bidir -t 64 -n 2" --bidir -t 64 -n 2 --time 5
measure "--echo -t 128 -l 256K" --echo -t 128 -l 262144 --time 5
measure "-t 256 -i 0.512" -t 256 -i 0.512 --time 5
measure "--reverse -t 256 -n 4" --reverse -t 256 -n 4 --time 5
measure "-t 60 -l 32M" -t 60 -l 33554432 --time 5
