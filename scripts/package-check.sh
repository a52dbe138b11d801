#!/usr/bin/env bash
# Checks the Debian package as a machine would install it, and the container image
# made from it. Nothing outside a scratch directory changes.
#
# The package: built by scripts/package.sh, installed with `dpkg --root` into the
# scratch directory (it has no maintainer scripts, and dpkg's log goes nowhere):
#   - fperf --version runs and names the package's version (and the protocol's);
#   - the package depends on no RDMA library and the binary links none (fperf loads
#     them when a run asks for them);
#   - /etc/default/fperf is a conffile readable by root only (it may hold the key);
#   - the server, with the options in /etc/default/fperf, run as an unprivileged user
#     with no capabilities, serves a test on loopback and exits 0 on SIGTERM;
#   - the exporter, with its options in /etc/default/fperf, run likewise, answers a
#     probe that tests an fperf server;
#   - the man pages (fperf, fperf-exporter, fperf-mesh) format without warnings (man -l);
#   - the bash, zsh and fish completions load and complete a flag;
#   - the service units (the server's and the exporter's) pass `systemd-analyze
#     verify`, and each one's sandbox rates an exposure of at most 2.0 in
#     `systemd-analyze security`.
# The image (deploy/Containerfile), with no container registry: in place of
# debian:bookworm-slim its base is a minimal Debian made from Debian's archive with
# mmdebstrap (kept in target/container/ for a week), and buildah builds and runs it
# with chroot isolation, its storage in the scratch directory:
#   - it builds; its entry point is fperf, its default command -s, its user not root;
#   - fperf in it serves a test from the host, and runs one against the host.
#
# Each check has a time limit. A check this host cannot run is printed as
# "skipped: WHY", never as passed. Exits 1 if a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "package check: $*"; }
passed=0
failed=0
skipped=0
# check WHAT FUNCTION: runs FUNCTION (below) within the time limit. The functions are
# quiet when they pass, but for a figure worth showing.
check() {
  local out
  if out="$(timeout 120 bash -c "$2" 2>&1)"; then
    say "passed: $1"
    [ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/    /'
    passed=$((passed + 1))
  else
    say "FAILED: $1"
    printf '%s\n' "$out" | tail -n 30 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}
skip() {
  say "skipped: $1 ($2)"
  skipped=$((skipped + 1))
}
finish() {
  say "$passed passed, $skipped skipped, $failed failed"
  [ "$failed" -eq 0 ]
}

if [ "$(id -u)" -ne 0 ]; then
  skip "the package and the image" "needs root: dpkg installs files as root"
  finish
  exit
fi
for tool in dpkg-deb man setpriv zsh fish; do
  command -v "$tool" >/dev/null || { echo "package check: $tool is missing (scripts/setup.sh --tests installs it)" >&2; exit 1; }
done

deb="$(timeout 1200 scripts/package.sh)"
version="$(dpkg-deb -f "$deb" Version)"
root="$(mktemp -d /tmp/fperf-package.XXXXXX)"
trap 'rm -rf "$root"' EXIT
chmod 755 "$root" # the server check runs the installed binary as another user
fperf="$root/usr/bin/fperf"
export deb version root fperf
say "installing $deb into $root"
mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
touch "$root/var/lib/dpkg/status"
# The libraries it depends on are the host's; this scratch system has none.
if ! out="$(timeout 60 dpkg --root="$root" --log=/dev/null --force-depends -i "$deb" 2>&1)"; then
  say "FAILED: the package installs with dpkg"
  printf '%s\n' "$out" | sed 's/^/    /'
  exit 1
fi
say "passed: the package installs with dpkg"
passed=$((passed + 1))

# serves_a_test SERVER CLIENT CLEAN [OPTION...]: starts `SERVER -s OPTION... -p PORT
# -B 127.0.0.1` in the background, runs `CLIENT -c 127.0.0.1 -p PORT -m 16` against it
# until it connects, then stops the server with SIGTERM. SERVER and CLIENT are command
# lines (split on spaces). The server must report the test, and with CLEAN=1 exit 0.
# Another port is tried when the first is taken.
serves_a_test() {
  local server_cmd=$1 client_cmd=$2 clean=$3 port server status
  shift 3
  for _ in 1 2 3; do
    port=$((20000 + RANDOM % 20000))
    # shellcheck disable=SC2086 # command lines and options, split on purpose
    $server_cmd -s "$@" -p "$port" -B 127.0.0.1 >"$root/server.out" 2>&1 &
    server=$!
    for _ in $(seq 20); do
      sleep 0.3
      kill -0 "$server" 2>/dev/null || break
      # shellcheck disable=SC2086
      if $client_cmd -c 127.0.0.1 -p "$port" -m 16 >"$root/client.out" 2>&1; then
        # The server prints its report just after the client has its own.
        for _ in $(seq 20); do
          grep -q '^received' "$root/server.out" && break
          sleep 0.2
        done
        kill -TERM "$server"
        status=0
        wait "$server" || status=$?
        if [ "$clean" = 1 ] && [ "$status" -ne 0 ]; then
          echo "the server exited $status on SIGTERM"
          cat "$root/server.out"
          return 1
        fi
        grep -q '^received' "$root/server.out" || { cat "$root/server.out"; return 1; }
        return 0
      fi
    done
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    grep -q 'in use' "$root/server.out" || break
  done
  cat "$root/server.out" "$root/client.out" 2>/dev/null
  return 1
}
installed_version() {
  local said
  said="$("$fperf" --version)"
  case "$said" in
    "fperf $version (protocol "*")") ;;
    *) echo "fperf --version said '$said'; the package is $version"; return 1 ;;
  esac
}
no_rdma_dependency() {
  local depends
  depends="$(dpkg-deb -f "$deb" Depends)"
  ! grep -E 'libfabric|libibverbs|librdmacm' <<<"Depends: $depends" &&
    ! ldd "$fperf" | grep -E 'libfabric|libibverbs|librdmacm'
}
options_file() {
  grep -qx /etc/default/fperf "$root/var/lib/dpkg/info/fperf.conffiles" || { echo "not a conffile"; return 1; }
  local mode
  mode="$(stat -c %a "$root/etc/default/fperf")"
  [ "$mode" = 600 ] || { echo "mode $mode, not 600"; return 1; }
}
unprivileged_server() {
  local opts
  # The service's options, with another port than the one a real server may hold.
  # shellcheck disable=SC1091 # the installed copy
  opts="$(. "$root/etc/default/fperf" && echo "$FPERF_OPTS")"
  opts="$(sed -E 's/(^| )-p [0-9]+//' <<<"$opts")"
  # shellcheck disable=SC2086 # FPERF_OPTS holds several options, as in the unit.
  serves_a_test "setpriv --reuid=nobody --regid=nogroup --clear-groups --no-new-privs
    --inh-caps=-all --bounding-set=-all $fperf" "$fperf" 1 $opts
}
unprivileged_exporter() {
  local opts port web server exporter answer=""
  # shellcheck disable=SC1091 # the installed copy
  opts="$(. "$root/etc/default/fperf" && echo "$FPERF_EXPORTER_OPTS")"
  port=$((20000 + RANDOM % 10000)) web=$((30000 + RANDOM % 2000))
  opts="$(sed -E "s/--listen [^ ]+/--listen 127.0.0.1:$web/" <<<"$opts")"
  "$fperf" -s -p "$port" -B 127.0.0.1 >"$root/server.out" 2>&1 &
  server=$!
  # shellcheck disable=SC2086 # FPERF_EXPORTER_OPTS holds several options, as in the unit.
  setpriv --reuid=nobody --regid=nogroup --clear-groups --no-new-privs --inh-caps=-all \
    --bounding-set=-all "$fperf" exporter $opts >"$root/exporter.out" 2>&1 &
  exporter=$!
  for _ in $(seq 20); do
    sleep 0.3
    answer="$(curl -sS --max-time 10 "http://127.0.0.1:$web/probe?target=127.0.0.1:$port" 2>&1)" &&
      break
  done
  kill -TERM "$server" "$exporter" 2>/dev/null || true
  wait "$server" "$exporter" 2>/dev/null || true
  grep -qx 'fperf_probe_success 1' <<<"$answer" ||
    { echo "$answer"; cat "$root/server.out" "$root/exporter.out"; return 1; }
}
man_page() {
  local err page flag
  for page in fperf:--max-memory fperf-exporter:--max-probes fperf-mesh:--fail-on-outliers; do
    flag="${page#*:}" page="${page%%:*}"
    err="$(MANWIDTH=80 MANPAGER=cat man --warnings -E UTF-8 -l "$root/usr/share/man/man1/$page.1.gz" 2>&1 >"$root/man.out")"
    [ -z "$err" ] || { echo "$page.1: $err"; return 1; }
    grep -q -- "$flag" "$root/man.out" || { echo "no $flag in $page.1"; return 1; }
  done
}
bash_completion() {
  # shellcheck disable=SC2016 # expanded by the inner bash
  bash --norc --noprofile -c 'source "$1" && complete -p fperf &&
    COMP_WORDS=(fperf --loop) COMP_CWORD=1 COMP_LINE="fperf --loop" COMP_POINT=12 &&
    _fperf fperf --loop fperf && printf "%s\n" "${COMPREPLY[@]}"' _ \
    "$root/usr/share/bash-completion/completions/fperf" | grep -qx -- --loopback
}
zsh_completion() {
  # shellcheck disable=SC2016 # expanded by zsh
  zsh -f -c 'fpath=("$1" $fpath); autoload -Uz compinit && compinit -u -D &&
    [[ ${_comps[fperf]} == _fperf ]]' _ "$root/usr/share/zsh/vendor-completions"
}
fish_completion() {
  # fish keeps its state under these; point them into the scratch directory.
  # shellcheck disable=SC2016 # expanded by fish
  XDG_CONFIG_HOME="$root/fish" XDG_DATA_HOME="$root/fish" XDG_CACHE_HOME="$root/fish" \
    fish --no-config -c 'source $argv[1]; and complete -C"fperf --loop"' \
    "$root/usr/share/fish/vendor_completions.d/fperf.fish" | grep -q -- '^--loopback'
}
export units_list="fperf.service fperf-exporter.service"
unit_verifies() {
  # shellcheck disable=SC2086 # the unit names
  systemd-analyze verify --man=no --recursive-errors=no --root="$root" $units_list
}
unit_sandbox() {
  local report unit status=0
  for unit in $units_list; do
    report="$(systemd-analyze security --offline=true --root="$root" --threshold=20 \
      --no-pager "$unit")" || status=$?
    echo "$unit: $(tail -n 1 <<<"$report")"
  done
  return "$status"
}
export -f serves_a_test installed_version no_rdma_dependency options_file \
  unprivileged_server unprivileged_exporter man_page bash_completion zsh_completion fish_completion \
  unit_verifies unit_sandbox

check "the installed fperf --version says $version" installed_version
check "no dependency on the RDMA libraries (loaded at run time)" no_rdma_dependency
check "/etc/default/fperf is a conffile readable by root only" options_file
check "the server with /etc/default/fperf's options, unprivileged, serves a test" unprivileged_server
check "the exporter with /etc/default/fperf's options, unprivileged, answers a probe" unprivileged_exporter
check "the man pages (fperf, fperf-exporter) format without warnings (man -l)" man_page
check "the bash completion loads and completes --loopback" bash_completion
check "the zsh completion loads (compinit)" zsh_completion
check "the fish completion loads and completes --loopback" fish_completion

# Whether systemd-analyze can check units on this host at all: a unit that is surely
# valid must pass, or a failure would say nothing about fperf.service.
canary="$root/canary"
mkdir -p "$canary/lib/systemd/system" "$canary/usr/bin"
cp /bin/true "$canary/usr/bin/true"
printf '[Service]\nExecStart=/usr/bin/true\n' >"$canary/lib/systemd/system/canary.service"
if ! command -v systemd-analyze >/dev/null; then
  skip "the service unit (systemd-analyze verify and security)" "systemd-analyze is not installed"
elif ! why="$(timeout 60 systemd-analyze verify --man=no --recursive-errors=no --root="$canary" canary.service 2>&1)"; then
  skip "the service unit (systemd-analyze verify and security)" "systemd-analyze cannot check units here: ${why%%$'\n'*}"
else
  check "the service units (fperf, fperf-exporter) pass systemd-analyze verify" unit_verifies
  check "the service units' sandboxes: exposure at most 2.0 each (systemd-analyze security)" unit_sandbox
fi

# The image. buildah keeps everything under the scratch directory.
buildah="buildah --root $root/containers --runroot $root/containers-run --storage-driver vfs"
export buildah
# The base image from $base, and whether a container of it runs here at all.
base_image() {
  local container
  container="$($buildah from scratch)" &&
    $buildah add "$container" "$base" / >/dev/null &&
    $buildah commit --quiet "$container" localhost/fperf-check-base >/dev/null &&
    container="$($buildah from localhost/fperf-check-base)" &&
    $buildah run --isolation chroot "$container" -- true
}
image_builds() {
  $buildah bud --quiet --isolation chroot --build-arg BASE=localhost/fperf-check-base \
    -f deploy/Containerfile -t localhost/fperf-check . >/dev/null
}
image_config() {
  local config
  config="$($buildah inspect --format '{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}} {{.OCIv1.Config.User}}' localhost/fperf-check)"
  [[ "$config" =~ ^\[fperf\]\ \[-s\]\ [1-9] ]] || { echo "entry point, command, user: $config"; return 1; }
}
image_server() {
  local container
  container="$($buildah from localhost/fperf-check)"
  # buildah run ends the server with SIGKILL, not SIGTERM: only its report counts.
  serves_a_test "$buildah run --isolation chroot $container -- fperf" "$fperf" 0
}
image_client() {
  local container
  container="$($buildah from localhost/fperf-check)"
  serves_a_test "$fperf" "$buildah run --isolation chroot $container -- fperf" 1
}
export -f base_image image_builds image_config image_server image_client

base=target/container/bookworm-minbase.tar
export base
what="the container image (build, entry point, server and client)"
if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
  skip "$what" "buildah or mmdebstrap is not installed"
else
  mkdir -p target/container
  if [ -z "$(find "$base" -mtime -7 2>/dev/null)" ]; then
    say "making the image's base from Debian's archive (mmdebstrap, about a minute)"
    if timeout 600 mmdebstrap --variant=minbase --format=tar --quiet bookworm "$base.new" \
      >"$root/mmdebstrap.log" 2>&1; then
      mv "$base.new" "$base"
    fi
  fi
  if [ ! -s "$base" ]; then
    skip "$what" "mmdebstrap could not make a base image: $(tail -n 1 "$root/mmdebstrap.log")"
  elif ! why="$(timeout 120 bash -c base_image 2>&1)"; then
    skip "$what" "buildah cannot run a container here: ${why##*$'\n'}"
  else
    check "the image builds from deploy/Containerfile" image_builds
    check "the image's entry point is fperf, its command -s, its user not root" image_config
    check "fperf -s in the image serves a test from the host" image_server
    check "fperf -c in the image runs a test against the host" image_client
  fi
fi
finish
