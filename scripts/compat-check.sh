#!/usr/bin/env bash
# This build against the previous release, both ways: builds the release before this
# one from the repository's own history (CHANGELOG.md names its commit) in a git
# worktree under target/compat/, then runs tests/compat.rs's mixed-version tests with
# FPERF_PREVIOUS set to its binary. Prints "compat check: skipped: WHY" when it cannot
# run here (no earlier release, or its commit is not in this clone).
set -euo pipefail
cd "$(dirname "$0")/.."
current="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
# The newest release in CHANGELOG.md other than this version, and its commit.
read -r previous commit < <(awk -v current="$current" '
  /^## \[[0-9]/ { version = $2; gsub(/[][]/, "", version); next }
  /^Commit: / && version != "" && version != current { print version, $2; exit }
' CHANGELOG.md) || true
if [ -z "${commit:-}" ]; then
  echo "compat check: skipped: CHANGELOG.md names no release before $current"
  exit 0
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "compat check: skipped: release $previous's commit $commit is not in this clone's history"
  exit 0
fi
dir="target/compat/$previous"
if [ ! -d "$dir/src" ]; then
  mkdir -p "$dir"
  git worktree prune
  git worktree add --detach "$dir/src" "$commit" >/dev/null
fi
echo "compat check: building fperf $previous ($commit)"
# Without debug info: only its behaviour on the wire is tested, and it builds sooner.
(cd "$dir/src" && CARGO_PROFILE_DEV_DEBUG=0 CARGO_TARGET_DIR="$PWD/../target" cargo build --locked --bin fperf 2>&1 | tail -n 3)
export FPERF_PREVIOUS="$PWD/$dir/target/debug/fperf"
"$FPERF_PREVIOUS" --version
cargo test --release --test compat -- --ignored needs_previous_release
