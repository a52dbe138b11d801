#!/usr/bin/env bash
# The whole test suite: set-up, then every unit and integration test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --all-targets
cargo test --release -- --test-threads="${FPERF_TEST_THREADS:-4}"
