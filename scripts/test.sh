#!/usr/bin/env bash
# The whole test suite: set-up, then every unit and integration test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --all-targets
# --all-targets: unit and integration tests (there are no doc-tests), so the last
# summary line is a real one.
cargo test --release --all-targets -- --test-threads="${FPERF_TEST_THREADS:-4}"
# bench/compare's target verdicts and pooling (made-up samples; nothing is run).
python3 -m unittest discover -s bench -p 'test_*.py'
