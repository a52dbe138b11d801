#!/usr/bin/env bash
# The whole test suite: set-up, then every unit, doc and integration test.
#
# Tests that need something of the host are marked #[ignore], so the first run lists
# them as ignored. The runs after it take each group whose need this host meets; what
# this host cannot run stays reported as ignored, never as passed:
#   tests/netns_*.rs, needs_root::     root (network and mount namespaces, nftables)
#   needs_rdma_device::                an RDMA device (/sys/class/infiniband)
#   needs_no_rdma_device::             no RDMA device (the errors saying how to add one)
#   tests/softroce_vm.rs               QEMU and a kernel package for the Soft-RoCE VM
#   tests/compat.rs needs_previous_release::
#                                      the previous release's binary, which
#                                      scripts/compat-check.sh builds from git history
#   tests/iperf3.rs                    the iperf3 program (Debian's, then a current
#                                      release that scripts/iperf3-current.sh fetches)
#   tests/exporter.rs                  promtool and prometheus (Debian's prometheus)
#   scripts/package-check.sh           root (it installs the Debian package into a
#                                      scratch directory); systemd-analyze for the unit;
#                                      buildah and Debian's archive for the image
#   scripts/slurm-check.sh             root, and Slurm and munge (it starts a single-node
#                                      Slurm on loopback for deploy/slurm/'s batch script)
#   scripts/k8s-check.sh               PyPI, once (kubernetes-validate, for the manifests
#                                      in deploy/k8s/); root for the Job's script's run
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
threads="${FPERF_TEST_THREADS:-4}"
cargo build --release --all-targets
cargo test --release --all-targets -- --test-threads="$threads"
cargo test --release --doc

gated() { # gated TEST-TARGET [FILTER]: the target's ignored tests (matching FILTER)
  cargo test --release --test "$1" -- --ignored --test-threads="$threads" ${2:+"$2"}
}
not_run=()
if [ "$(id -u)" -eq 0 ]; then
  gated netns_udp
  gated netns_xdp
  gated netns_tos
  gated netns_mesh
  gated netns_under_load
  gated rdma_ofi needs_root::
else
  not_run+=("needs root: not root")
fi
if compgen -G '/sys/class/infiniband/*' >/dev/null; then
  gated rdma_verbs needs_rdma_device::
  gated rdma_ofi needs_rdma_device::
else
  not_run+=("needs an RDMA device: none here")
  gated rdma_verbs needs_no_rdma_device::
  gated rdma_ofi needs_no_rdma_device::
fi
if command -v iperf3 >/dev/null 2>&1; then
  gated iperf3
else
  not_run+=("needs iperf3: not installed")
fi
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  gated exporter
else
  not_run+=("needs Prometheus (promtool, prometheus): not installed")
fi
# The same against a current iperf3 release (Debian 13's, unpacked under target/).
current_rc=0
current_iperf3="$(scripts/iperf3-current.sh 2>target/iperf3-current.log)" || current_rc=$?
case "$current_rc" in
  0) FPERF_IPERF3="$current_iperf3" gated iperf3 ;;
  3) not_run+=("the iperf3 tests against a current release: $(tail -n 1 target/iperf3-current.log)") ;;
  *) cat target/iperf3-current.log >&2; exit "$current_rc" ;;
esac
# This build against the previous release, both ways (built from this repository's
# history; CHANGELOG.md names its commit).
scripts/compat-check.sh | tee target/compat-check.log
while IFS= read -r why; do
  not_run+=("the mixed-version check: ${why#compat check: skipped: }")
done < <(grep '^compat check: skipped: ' target/compat-check.log || true)
# The Debian package, installed into a scratch directory and checked there, and the
# container image made from it.
scripts/package-check.sh | tee target/package-check.log
while IFS= read -r why; do
  not_run+=("the package check: ${why#package check: skipped: }")
done < <(grep '^package check: skipped: ' target/package-check.log || true)
# The Slurm batch script under a real single-node Slurm, and the Kubernetes manifests,
# validated offline, with the Job's script run on loopback.
for check in slurm k8s; do
  timeout 1200 "scripts/$check-check.sh" | tee "target/$check-check.log"
  while IFS= read -r why; do
    not_run+=("the $check check: ${why#"$check check: skipped: "}")
  done < <(grep "^$check check: skipped: " "target/$check-check.log" || true)
done
vm_rc=0
vm_why="$(scripts/softroce/run.sh --prepare 2>&1 >/dev/null)" || vm_rc=$?
case "$vm_rc" in
  0) gated softroce_vm ;;
  3) not_run+=("the Soft-RoCE VM: ${vm_why#softroce: }") ;;
  *) echo "$vm_why" >&2; exit "$vm_rc" ;;
esac
# The fuzzers for a bounded time each where a nightly toolchain is (cargo-fuzz needs
# one): the control sessions, an iperf3 peer's messages, the exporter's requests and a
# mesh coordinator's request. tests/props.rs drives the same code on every host.
fuzzers=(session iperf3 exporter mesh)
if ! cargo +nightly --version >/dev/null 2>&1; then
  not_run+=("the fuzzers (${fuzzers[*]}): no nightly toolchain (tests/props.rs drives the same code)")
elif ! command -v cargo-fuzz >/dev/null 2>&1 && ! cargo install --locked cargo-fuzz; then
  not_run+=("the fuzzers (${fuzzers[*]}): cargo-fuzz could not be installed (tests/props.rs drives the same code)")
else
  for fuzzer in "${fuzzers[@]}"; do
    if (cd fuzz && cargo +nightly fuzz run "$fuzzer" -- -max_total_time="${FPERF_FUZZ_SECS:-20}" \
        -rss_limit_mb=2048 >"../target/fuzz-$fuzzer.log" 2>&1); then
      echo "$fuzzer fuzzer: $(tail -n 1 "target/fuzz-$fuzzer.log")"
    else
      tail -n 60 "target/fuzz-$fuzzer.log"
      exit 1
    fi
  done
fi
for why in "${not_run[@]}"; do
  echo "not run here (listed above as ignored or skipped): $why"
done
# bench/compare's target verdicts and pooling (made-up samples; nothing is run).
python3 -m unittest discover -s bench -p 'test_*.py'
