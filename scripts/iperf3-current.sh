#!/usr/bin/env bash
# Prints the path of a current iperf3 release for the interop tests, fetching it first
# if need be: Debian 13's iperf3 with the libraries it needs, unpacked under
# target/iperf3-current and started with its own dynamic loader, so nothing of this
# host changes. Exits 3 with the reason when it cannot be had (no network, a changed
# archive); the test script then reports those tests as not run.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/iperf3-current
run="$dir/iperf3"
if [ -x "$run" ] && "$run" --version >/dev/null 2>&1; then
  echo "$PWD/$run"
  exit 0
fi
mirror=http://deb.debian.org/debian
packages=(iperf3 libiperf0 libc6 libsctp1 libssl3t64 libzstd1 zlib1g)
rm -rf "$dir" && mkdir -p "$dir/debs" "$dir/root"
index="$dir/Packages"
if ! curl -fsS --max-time 120 "$mirror/dists/trixie/main/binary-amd64/Packages.xz" | xz -dc >"$index"; then
  echo "cannot fetch Debian 13's package index from $mirror" >&2
  exit 3
fi
for p in "${packages[@]}"; do
  file="$(awk -v want="$p" '$1 == "Package:" { hit = ($2 == want) } hit && $1 == "Filename:" { print $2; exit }' "$index")"
  if [ -z "$file" ] || ! curl -fsS --max-time 120 -o "$dir/debs/$p.deb" "$mirror/$file"; then
    echo "cannot fetch $p from $mirror" >&2
    exit 3
  fi
  dpkg-deb -x "$dir/debs/$p.deb" "$dir/root"
done
root="$PWD/$dir/root"
libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
cat >"$run" <<WRAPPER
#!/bin/sh
exec "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$libs" "$root/usr/bin/iperf3" "\$@"
WRAPPER
chmod +x "$run"
if ! "$run" --version >/dev/null 2>&1; then
  echo "the fetched iperf3 does not start here" >&2
  exit 3
fi
echo "$PWD/$run"
