#!/usr/bin/env bash
# Runs a shell script inside a small QEMU VM that has a Soft-RoCE device (rdma_rxe),
# so fperf's RDMA paths can be exercised on a host with no RDMA hardware or modules.
#
#   scripts/softroce/run.sh [--fperf PATH] [--add FILE]... [--timeout SECS] SCRIPT
#   scripts/softroce/run.sh --prepare      # fetch packages and the kernel only
#
# The VM runs Debian's kernel (vmlinuz and modules taken from the linux-image .deb with
# `apt-get download`, never installed on the host) and an initramfs built here from the
# host's files: busybox-static, rdma-core's user space (libibverbs + the rxe provider,
# librdmacm, ibverbs-utils, rdmacm-utils), iproute2's `rdma`, libfabric, and the fperf
# binary with the libraries ldd names. In the VM, init loads rdma_rxe and virtio_net
# (dependencies resolved from each module's modinfo `depends=`), gives eth0 (a
# virtio-net NIC on QEMU's user network, restricted: nothing leaves the host) the address
# $VM_IP, creates rxe0 on it, runs SCRIPT with `sh` (PATH has fperf; $VM_IP is set), and
# powers off. --add puts FILE (and the libraries ldd names) at the same path in the VM,
# e.g. a test binary.
#
# SCRIPT's stdout and stderr come back on the VM's second serial port and are printed on
# stdout; this script exits with SCRIPT's status. If the VM does not report a status
# within the time-out (default 120 s; QEMU is killed then, and on any exit of this
# script), or fails to boot or to set rxe0 up, it prints the VM's console and exits 125.
# If this host cannot run the VM at all (not x86-64 Debian, packages missing and not
# root, the kernel package cannot be fetched) it says why and exits 3. Missing host
# packages are installed with apt-get (needs root). Work files live in target/softroce/
# (git-ignored).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${SOFTROCE_WORK:-$ROOT/target/softroce}"
VM_IP=10.0.2.15
TIMEOUT=120
FPERF="$ROOT/target/release/fperf"
PREPARE_ONLY=0
SCRIPT=""
EXTRA=()

die() { echo "softroce: $*" >&2; exit 125; }
unavailable() { echo "softroce: cannot run the VM on this host: $*" >&2; exit 3; }
say() { echo "softroce: $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --fperf) FPERF="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --add) EXTRA+=("$(realpath "$2")"); shift 2 ;;
    --prepare) PREPARE_ONLY=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$SCRIPT" ] || die "one script only"; SCRIPT="$1"; shift ;;
  esac
done
[ "$PREPARE_ONLY" = 1 ] || [ -n "$SCRIPT" ] || die "usage: $0 [--fperf PATH] [--timeout SECS] SCRIPT"

# Host packages whose files go into the VM (and QEMU itself). rdma-core is not needed:
# it only adds udev rules and services.
PACKAGES=(qemu-system-x86 busybox-static kmod cpio iproute2
  libibverbs1 ibverbs-providers librdmacm1 ibverbs-utils rdmacm-utils libfabric1 libfabric-bin)

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" -eq 0 ] || unavailable "packages missing (${missing[*]}) and not root to install them"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=120 update -qq || unavailable "apt-get update failed"
  apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    unavailable "apt-get install ${missing[*]} failed"
}

# Fetches and unpacks the kernel package linux-image-amd64 depends on; prints its
# directory (one per kernel version, reused).
fetch_kernel() {
  local pkg ver dir deb
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
  if [ -z "$pkg" ]; then
    apt-get -o DPkg::Lock::Timeout=120 update -qq
    pkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
  fi
  [ -n "$pkg" ] || unavailable "apt knows no linux-image-amd64 (not a Debian amd64 host?)"
  ver="${pkg#linux-image-}"
  dir="$WORK/kernel/$ver"
  mkdir -p "$WORK/kernel"
  # One fetch at a time when several runs start together.
  exec 9>"$WORK/kernel/.lock"
  flock 9
  if [ ! -e "$dir/.done" ]; then
    say "fetching $pkg"
    rm -rf "$dir" && mkdir -p "$dir/deb"
    # _apt cannot write into root-owned work dirs: download as root, quietly.
    (cd "$dir/deb" && apt-get -o APT::Sandbox::User=root download "$pkg" >/dev/null) ||
      unavailable "apt-get download $pkg failed"
    deb="$(ls "$dir"/deb/*.deb)"
    dpkg-deb -x "$deb" "$dir/root"
    rm -f "$deb"
    touch "$dir/.done"
  fi
  exec 9>&-
  echo "$dir"
}

# Prints the modules to load, dependencies first, for the given module names.
module_order() {
  local moddir="$1"; shift
  declare -A path=() seen=()
  local f n
  while IFS= read -r f; do
    n="$(basename "$f" .ko)"; path["${n//-/_}"]="$f"
  done < <(find "$moddir/kernel" -name '*.ko')
  local builtin
  builtin="$(sed 's#.*/##; s#\.ko$##; s#-#_#g' "$moddir/modules.builtin")"
  visit() {
    local m="${1//-/_}" d
    [ -n "${seen[$m]:-}" ] && return
    seen[$m]=1
    if [ -z "${path[$m]:-}" ]; then
      grep -qx "$m" <<<"$builtin" && return
      die "kernel module $m not found in the kernel package"
    fi
    for d in $(modinfo -F depends "${path[$m]}" | tr ',' ' '); do visit "$d"; done
    echo "${path[$m]}"
  }
  for n in "$@"; do visit "$n"; done
}

# Copies a host file into the initramfs tree, merged-/usr style (/lib -> /usr/lib).
put() {
  local src="$1" dst="${2:-$1}"
  case "$dst" in /lib/*|/lib64/*|/bin/*|/sbin/*) dst="/usr$dst" ;; esac
  mkdir -p "$TREE$(dirname "$dst")"
  cp -L "$src" "$TREE$dst"
}

# Copies an executable or library and every shared library ldd says it needs.
put_with_libs() {
  local f="$1" lib
  [ -e "$f" ] || die "missing on host: $f"
  put "$f" "${2:-$f}"
  for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'); do
    [ -e "$TREE/usr$lib" ] || [ -e "$TREE$lib" ] || put "$lib"
  done
}

build_initramfs() {
  local kdir="$1" out="$2" moddir kver m
  kver="$(basename "$kdir")"
  moddir="$kdir/root/lib/modules/$kver"
  TREE="$(dirname "$out")/tree"
  rm -rf "$TREE"
  mkdir -p "$TREE"/{bin,dev,proc,sys,tmp,run,etc,modules,usr/lib,usr/lib64,usr/bin,usr/sbin}
  ln -s usr/lib "$TREE/lib"
  ln -s usr/lib64 "$TREE/lib64"
  cp /bin/busybox "$TREE/bin/busybox"
  ln -s busybox "$TREE/bin/sh"

  # crc32_generic: rxe allocates the "crc32" hash, which the kernel would load by alias
  # through modprobe (there is none in the VM); modinfo does not list it.
  module_order "$moddir" crc32_generic rdma_rxe ib_uverbs rdma_ucm virtio_pci virtio_net \
    >"$TREE/modules/order.paths"
  : >"$TREE/modules/order"
  while IFS= read -r m; do
    cp "$m" "$TREE/modules/"
    basename "$m" >>"$TREE/modules/order"
  done <"$TREE/modules/order.paths"
  rm "$TREE/modules/order.paths"

  local multi=/usr/lib/x86_64-linux-gnu
  put_with_libs "$FPERF" /usr/bin/fperf
  local tool
  for tool in rdma ibv_devices ibv_devinfo ibv_rc_pingpong rping fi_info; do
    put_with_libs "$(command -v "$tool")"
  done
  # Loaded at run time (dlopen), so ldd of the binaries does not name them.
  put_with_libs "$multi/libibverbs.so.1"
  put_with_libs "$multi/librdmacm.so.1"
  put_with_libs "$multi/libfabric.so.1"
  put_with_libs "$multi/libibverbs/librxe-rdmav34.so"
  put /etc/libibverbs.d/rxe.driver
  local extra
  for extra in "${EXTRA[@]}"; do put_with_libs "$extra"; done
  echo "root:x:0:0:root:/:/bin/sh" >"$TREE/etc/passwd"
  # Name resolution from files only: libfabric's verbs provider resolves the host's own
  # name (rdma_getaddrinfo), which without these fails with EAI_AGAIN.
  echo "hosts: files" >"$TREE/etc/nsswitch.conf"
  printf '127.0.0.1 localhost\n%s softroce\n' "$VM_IP" >"$TREE/etc/hosts"

  cp "$(dirname "$0")/init.sh" "$TREE/init"
  chmod +x "$TREE/init"
  cp "$SCRIPT" "$TREE/run.sh"
  echo "$VM_IP" >"$TREE/etc/vm_ip"
  (cd "$TREE" && find . | cpio -o -H newc --quiet) >"$out"
}

[ "$(uname -m)" = x86_64 ] || unavailable "not an x86-64 host"
command -v apt-get >/dev/null || unavailable "no apt-get (the harness uses Debian's packages)"
install_packages
KDIR="$(fetch_kernel)"
[ "$PREPARE_ONLY" = 1 ] && { say "ready: kernel $(basename "$KDIR")"; exit 0; }
[ -x "$FPERF" ] || die "no fperf binary at $FPERF (cargo build --release, or --fperf PATH)"
[ -r "$SCRIPT" ] || die "cannot read $SCRIPT"

mkdir -p "$WORK/runs"
RUN="$(mktemp -d "$WORK/runs/run.XXXXXX")"
build_initramfs "$KDIR" "$RUN/initramfs.cpio"

# KVM needs /dev/kvm and a CPU exposing VMX/SVM: inside a VM without nested
# virtualisation /dev/kvm may exist while guests never get past their first
# instructions, so the CPU flags are checked too.
kvm_unusable_because() {
  [ -e /dev/kvm ] || { echo "no /dev/kvm"; return; }
  { exec 3<>/dev/kvm; } 2>/dev/null || { echo "/dev/kvm cannot be opened"; return; }
  exec 3>&-
  grep -qwE 'vmx|svm' /proc/cpuinfo || { echo "the CPU has no VMX/SVM flag (no nested virtualisation)"; return; }
}
why_not_kvm="$(kvm_unusable_because)"
CLOCK_ARGS=""
if [ -z "$why_not_kvm" ]; then
  ACCEL=(-enable-kvm -cpu host)
  say "accelerator: kvm"
else
  ACCEL=(-accel tcg -cpu max)
  say "accelerator: tcg (software emulation, slower: $why_not_kvm)"
  # Under emulation the guest finds its vCPUs' TSCs unsynchronised and falls back to
  # the emulated HPET, where every clock read traps into QEMU (about 0.8 us against
  # 0.05 us). The vCPUs' TSCs are the host's, which is synchronised, so the guest may
  # trust them; otherwise every tool that reads the system clock per operation pays
  # for the emulator rather than for its own work.
  CLOCK_ARGS=" tsc=reliable"
fi

QEMU_PID=""
cleanup() {
  if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
    kill -KILL "$QEMU_PID" 2>/dev/null || true
  fi
  rm -rf "$RUN/tree" "$RUN/initramfs.cpio"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

: >"$RUN/console.log"
: >"$RUN/out.log"
qemu-system-x86_64 "${ACCEL[@]}" -smp 2 -m 1024 -nodefaults -no-user-config \
  -display none -no-reboot \
  -kernel "$KDIR/root/boot/vmlinuz-$(basename "$KDIR")" -initrd "$RUN/initramfs.cpio" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init${CLOCK_ARGS}" \
  -serial "file:$RUN/console.log" -serial "file:$RUN/out.log" \
  -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 \
  >"$RUN/qemu.log" 2>&1 &
QEMU_PID=$!

deadline=$((SECONDS + TIMEOUT))
while kill -0 "$QEMU_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
  sleep 0.2
done
timed_out=0
if kill -0 "$QEMU_PID" 2>/dev/null; then
  timed_out=1
  kill -KILL "$QEMU_PID" 2>/dev/null || true
fi
wait "$QEMU_PID" 2>/dev/null || true
QEMU_PID=""

# The serial line turned each \n into \r\n; the guest ends with "\nSOFTROCE-STATUS N\n".
tr -d '\r' <"$RUN/out.log" >"$RUN/out.txt"
status_line="$(tail -n 1 "$RUN/out.txt" | grep -a '^SOFTROCE-STATUS [0-9]*$' || true)"
if [ -n "$status_line" ]; then
  head -c "-$((${#status_line} + 2))" "$RUN/out.txt"
else
  cat "$RUN/out.txt"
fi
if [ -z "$status_line" ]; then
  if [ $timed_out = 1 ]; then
    say "the VM did not finish within ${TIMEOUT}s; killed it. Its console:"
  else
    say "the VM stopped without reporting a status. Its console:"
  fi
  tr -d '\r' <"$RUN/console.log" | tail -n 40 >&2
  cat "$RUN/qemu.log" >&2
  say "(the VM's console and output are kept in $RUN)"
  exit 125
fi
status="${status_line#SOFTROCE-STATUS }"
rm -rf "$RUN"
exit "$status"
