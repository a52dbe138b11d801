# shellcheck shell=bash
# Sourced by the check scripts (scripts/slurm-check.sh, scripts/k8s-check.sh): one line
# per check, "CHECK check: passed|FAILED|skipped: WHAT", and the tally at the end.
# The sourcing script sets check_name first.
say() { echo "${check_name:?set by the sourcing script} check: $*"; }
passed=0
failed=0
skipped=0
# pass WHAT [DETAIL]
pass() {
  say "passed: $1"
  [ -z "${2:-}" ] || printf '%s\n' "$2" | sed 's/^/    /'
  passed=$((passed + 1))
}
# fail WHAT [OUTPUT]: the output's last 40 lines go with it.
fail() {
  say "FAILED: $1"
  [ -z "${2:-}" ] || printf '%s\n' "$2" | tail -n 40 | sed 's/^/    /'
  failed=$((failed + 1))
}
# skip WHAT WHY
skip() { say "skipped: $1 ($2)"; skipped=$((skipped + 1)); }
# finish: the tally; fails when a check failed.
finish() {
  say "$passed passed, $skipped skipped, $failed failed"
  [ "$failed" -eq 0 ]
}
