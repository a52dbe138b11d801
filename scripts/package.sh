#!/usr/bin/env bash
# Builds the Debian package target/debian/fperf_VERSION_amd64.deb: the binary, its man
# pages (fperf, fperf-mesh, fperf-exporter) and bash, zsh and fish completions
# (written by the binary itself, so they match its --help), the service units fperf.service and fperf-exporter.service and their
# options in /etc/default/fperf. Installs cargo-deb first if it is missing. Prints the package's
# path.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deb --version >/dev/null 2>&1; then
  echo "package: installing cargo-deb (once)" >&2
  cargo install --locked --version '^3' cargo-deb >&2
fi
cargo build --release >&2
fperf="${CARGO_TARGET_DIR:-target}/release/fperf"
# Cargo.toml's package.metadata.deb takes them from here.
generated=target/generated
mkdir -p "$generated"
"$fperf" --generate man >"$generated/fperf.1"
"$fperf" --generate man-exporter >"$generated/fperf-exporter.1"
"$fperf" --generate man-mesh >"$generated/fperf-mesh.1"
"$fperf" --generate complete-bash >"$generated/fperf.bash"
"$fperf" --generate complete-zsh >"$generated/_fperf"
"$fperf" --generate complete-fish >"$generated/fperf.fish"
# One package in target/debian, whatever the target directory: deploy/Containerfile
# installs the one it finds there.
mkdir -p target/debian
rm -f target/debian/fperf_*.deb
cargo deb --no-build --strip --quiet --output target/debian/
