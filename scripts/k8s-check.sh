#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/k8s/ without a cluster:
#   - each validates against the Kubernetes API's schemas, strictly (no unknown field),
#     for the oldest and the newest Kubernetes version that kubernetes-validate (from
#     PyPI, in a virtual environment under target/) knows of fperf's range;
#   - a manifest with an unknown field, a wrong type, a missing required field or an
#     unknown kind fails that validation, so a pass means something;
#   - they fit together: each Service selects its DaemonSet's pods, every Secret used is
#     the one in secret.yaml, the servers run with --allow-mesh and the key where it is
#     mounted, and the Job's service and port are the servers';
#   - the Job's shell script passes `sh -n` (and shellcheck, where it is installed);
#   - end to end, as root: the Job's script, run outside Kubernetes in a mount namespace
#     whose /etc/hosts names three loopback addresses as the Service, finds the three
#     servers (started with the DaemonSet's arguments) and prints the mesh's JSON; and
#     again with IPv6 addresses only, in a network namespace of its own.
# A check this host cannot run is printed as "skipped: WHY", never as passed. Exits 1 if
# a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

check_name=k8s
# shellcheck source=scripts/check-tally.sh
. scripts/check-tally.sh

what_schema="the manifests validate against the Kubernetes API schemas (kubernetes-validate --strict)"
what_broken="broken manifests fail that validation (unknown field, wrong type, missing field, unknown kind)"
what_fit="the manifests fit together (selectors, Secret, key path, --allow-mesh, service name, port)"
what_script="the Job's script passes sh -n and shellcheck"
what_e2e="the Job's script finds the servers behind a name and runs the mesh (3 servers on loopback)"
what_e2e6="without IPv4, the Job's script finds the servers' IPv6 addresses and runs the mesh (3 servers in a network namespace)"
manifests=(deploy/k8s/*.yaml)
scratch="$(mktemp -d /tmp/fperf-k8s.XXXXXX)"
servers=()
cleanup() {
  local pid
  for pid in "${servers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# The validator, in a virtual environment kept under target/ (Debian's pip installs
# nothing into the system). Its version is pinned: a new one may know other schemas.
validator_version=1.37.0
kube_versions=(1.28.0 1.37.0)
venv=target/k8s-validate-venv
python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3 || true)"
have_validator=0
if [ -x "$venv/bin/kubernetes-validate" ] &&
  [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" = "$validator_version" ]; then
  have_validator=1
elif [ -z "$python" ]; then
  why="python3 is not installed"
elif ! out="$(timeout 60 "$python" -m venv --clear "$venv" 2>&1)"; then
  why="cannot make a virtual environment in $venv (scripts/setup.sh --tests installs python3-venv): ${out##*$'\n'}"
elif ! timeout 15 "$venv/bin/python" -c \
  'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/kubernetes-validate/", timeout=10)' \
  >/dev/null 2>&1; then
  why="PyPI cannot be reached, for kubernetes-validate"
elif ! out="$(timeout 300 "$venv/bin/pip" install --quiet --disable-pip-version-check \
  "kubernetes-validate==$validator_version" 2>&1)"; then
  fail "installing kubernetes-validate $validator_version from PyPI" "$out"
  why="kubernetes-validate could not be installed"
else
  have_validator=1
fi

# validate FILE...: kubernetes-validate --strict, for each version; every resource must
# pass: a kind it has no schema for is only a warning there, and fails here.
validate() {
  local v out status=0
  for v in "${kube_versions[@]}"; do
    out="$("$venv/bin/kubernetes-validate" --strict -k "$v" "$@" 2>&1)" || status=1
    printf '%s\n' "$out"
    ! grep -qv '^INFO .* passed for resource ' <<<"$out" || status=1
  done
  return "$status"
}

if [ "$have_validator" = 1 ]; then
  if out="$(validate "${manifests[@]}")"; then
    pass "$what_schema" "$(grep -c passed <<<"$out") resources passed, against Kubernetes ${kube_versions[*]}"
  else
    fail "$what_schema" "$out"
  fi
  # Each breakage, made with sed in a copy, must be refused.
  problems=()
  while IFS='|' read -r file edit; do
    sed "$edit" "deploy/k8s/$file" >"$scratch/broken.yaml"
    if cmp -s "deploy/k8s/$file" "$scratch/broken.yaml"; then
      problems+=("the edit '$edit' changed nothing in $file")
    elif validate "$scratch/broken.yaml" >/dev/null; then
      problems+=("$file with '$edit' passed")
    fi
  done <<'EOF'
servers-host-network.yaml|s/hostNetwork: true/hostNetwrok: true/
servers.yaml|0,/containerPort: 28444/s//containerPort: "28444x"/
servers.yaml|/^  selector:$/,/^  template:$/{/^  template:$/!d}
mesh-job.yaml|s/^      containers:$/      containerz:/
mesh-job.yaml|s/^kind: Job$/kind: Jbo/
secret.yaml|s/^  key: .*/  key: 3/
EOF
  if [ ${#problems[@]} -eq 0 ]; then
    pass "$what_broken"
  else
    fail "$what_broken" "$(printf '%s\n' "${problems[@]}")"
  fi
else
  skip "$what_schema" "$why"
  skip "$what_broken" "$why"
fi

# How the manifests fit together, read with PyYAML (the validator's, or the system's).
yaml_python="$python"
[ "$have_validator" = 0 ] || yaml_python="$venv/bin/python"
if [ -z "$yaml_python" ] || ! "$yaml_python" -c 'import yaml' 2>/dev/null; then
  skip "$what_fit" "no Python with PyYAML"
  skip "$what_script" "no Python with PyYAML"
  skip "$what_e2e" "no Python with PyYAML"
  finish
  exit
fi
if out="$("$yaml_python" - "$scratch" "${manifests[@]}" <<'EOF' 2>&1
import shlex, sys, yaml
scratch, files = sys.argv[1], sys.argv[2:]
docs = {}
for f in files:
    for d in yaml.safe_load_all(open(f)):
        docs[(d["kind"], d["metadata"]["name"])] = d
def get(kind, name):
    assert (kind, name) in docs, f"no {kind} {name}"
    return docs[(kind, name)]
secrets = {n for (k, n) in docs if k == "Secret"}
assert secrets == {"fperf-mesh-key"}, secrets
def pod_checks(what, pod):
    spec = pod["spec"]
    sc = spec["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] != 0, f"{what} may run as root"
    key = [v for v in spec["volumes"] if "secret" in v]
    assert len(key) == 1 and key[0]["secret"]["secretName"] in secrets, f"{what}: {key}"
    mode = key[0]["secret"]["defaultMode"]
    assert mode & 0o007 == 0 and (mode & 0o040 == 0 or sc.get("fsGroup") == sc["runAsGroup"]), \
        f"{what}: the key is readable by others, or not by the pod's user: {oct(mode)}"
    (c,) = spec["containers"]
    mount = [m for m in c["volumeMounts"] if m["name"] == key[0]["name"]]
    assert len(mount) == 1 and mount[0]["readOnly"], f"{what}: {mount}"
    return c, mount[0]["mountPath"] + "/key"
server_port = None
for name, host_network in (("fperf-mesh", False), ("fperf-mesh-host", True)):
    svc, ds = get("Service", name), get("DaemonSet", name)
    assert svc["spec"]["clusterIP"] == "None", f"Service {name} is not headless"
    labels = ds["spec"]["template"]["metadata"]["labels"]
    for k, v in svc["spec"]["selector"].items():
        assert labels.get(k) == v, f"Service {name} does not select DaemonSet {name}'s pods"
    for k, v in ds["spec"]["selector"]["matchLabels"].items():
        assert labels.get(k) == v, f"DaemonSet {name}'s selector misses its pods"
    spec = ds["spec"]["template"]["spec"]
    assert spec.get("hostNetwork", False) == host_network, f"{name}: hostNetwork"
    if host_network:
        assert spec.get("dnsPolicy") == "ClusterFirstWithHostNet", f"{name}: dnsPolicy"
    c, key = pod_checks(f"DaemonSet {name}", ds["spec"]["template"])
    args = c["args"]
    assert args[:2] == ["-s", "--allow-mesh"] and args[args.index("--auth-key") + 1] == key, \
        f"{name} runs {args}"
    ports = {p["containerPort"] for p in c["ports"]} | {p["port"] for p in svc["spec"]["ports"]}
    assert len(ports) == 1, f"{name}'s ports: {ports}"
    server_port = ports.pop()
    with open(f"{scratch}/server-args", "w") as f:
        f.write("\n".join(args) + "\n")
job = get("Job", "fperf-mesh")
spec = job["spec"]
assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] > 0, "the Job is not bounded"
c, key = pod_checks("the Job", spec["template"])
env = {e["name"]: e["value"] for e in c["env"]}
get("Service", env["FPERF_MESH_SERVICE"])
assert int(env["FPERF_PORT"]) == server_port, f"the Job's port {env['FPERF_PORT']}, the servers' {server_port}"
script = c["command"][2]
assert c["command"][:2] == ["/bin/sh", "-c"] and f"--auth-key {key} --json" in script, c["command"][:2]
with open(f"{scratch}/job.sh", "w") as f:
    f.write(script)
with open(f"{scratch}/job.env", "w") as f:
    f.write("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
EOF
)"; then
  pass "$what_fit"
else
  fail "$what_fit" "$out"
fi

if [ ! -s "$scratch/job.sh" ]; then
  skip "$what_script" "the Job's script could not be read"
  skip "$what_e2e" "the Job's script could not be read"
  finish
  exit
fi
problems=()
out="$(sh -n "$scratch/job.sh" 2>&1)" || problems+=("sh -n: $out")
if command -v shellcheck >/dev/null; then
  out="$(shellcheck -s sh "$scratch/job.sh" 2>&1)" || problems+=("$out")
  lint=" and shellcheck"
else
  lint=" (shellcheck is not installed)"
fi
if [ ${#problems[@]} -eq 0 ]; then
  pass "the Job's script passes sh -n$lint"
else
  fail "$what_script" "$(printf '%s\n' "${problems[@]}")"
fi

# Checks a mesh document ($1) over the hosts given after it, in that order: a full
# matrix with a rate in every cell off the diagonal. Prints the rates, or what is wrong.
mesh_verdict() {
  "$yaml_python" - "$@" <<'EOF' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
want = sys.argv[2:]
assert doc["hosts"] == want, f"hosts {doc['hosts']}, not {want}"
n = len(want)
m = doc["matrix"]
assert len(m) == n and all(len(row) == n for row in m), f"the matrix is not {n}x{n}: {m}"
for i in range(n):
    for j in range(n):
        v = m[i][j]
        assert (v is None) if i == j else (isinstance(v, (int, float)) and v > 0), f"cell {i},{j} is {v}"
print(" ".join(f"{v / 1e9:.1f}" for row in m for v in row if v is not None), "Gbit/s")
EOF
}

# End to end: three servers on 127.0.0.2-4 with the DaemonSet's arguments, all on one
# port as in a cluster, and a hosts file that gives the Service's name those addresses.
fperf="$PWD/target/release/fperf"
why_no_e2e=""
if [ "$(id -u)" -ne 0 ]; then
  why_no_e2e="needs root: a mount namespace with its own /etc/hosts"
elif ! unshare -m true 2>/dev/null; then
  why_no_e2e="no mount namespaces here (unshare -m)"
elif [ ! -x "$fperf" ]; then
  why_no_e2e="fperf is not built (cargo build --release)"
elif ! mesh_help="$("$fperf" mesh --help 2>&1)"; then
  why_no_e2e="this fperf has no mesh command: ${mesh_help%%$'\n'*}"
fi
if [ -n "$why_no_e2e" ]; then
  skip "$what_e2e" "$why_no_e2e"
else
  # shellcheck disable=SC1091 # written above
  set -a && . "$scratch/job.env" && set +a
  FPERF_PORT=$((30000 + RANDOM % 20000))
  FPERF_MESH_ARGS="--time 1"
  mkdir -m 700 "$scratch/bin" "$scratch/tmp" "$scratch/etc"
  ln -s "$fperf" "$scratch/bin/fperf"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$scratch/key"
  chmod 600 "$scratch/key"
  sed -i -e "s|/etc/fperf/key|$scratch/key|g" -e "s|/tmp/mesh.json|$scratch/tmp/mesh.json|g" "$scratch/job.sh"
  mapfile -t args <"$scratch/server-args"
  args=("${args[@]/#\/etc\/fperf\/key/$scratch/key}")
  printf '127.0.0.1 localhost\n' >"$scratch/etc/hosts"
  for a in 2 3 4; do
    "$fperf" "${args[@]}" -p "$FPERF_PORT" -B "127.0.0.$a" >"$scratch/server-$a.out" 2>&1 &
    servers+=($!)
    printf '127.0.0.%s %s\n' "$a" "$FPERF_MESH_SERVICE" >>"$scratch/etc/hosts"
  done
  status=0
  # shellcheck disable=SC2016 # expanded by the inner shell
  PATH="$scratch/bin:$PATH" FPERF_PORT="$FPERF_PORT" FPERF_MESH_ARGS="$FPERF_MESH_ARGS" \
    timeout 120 unshare -m sh -c 'mount --bind "$1" /etc/hosts && exec sh "$2"' _ \
    "$scratch/etc/hosts" "$scratch/job.sh" >"$scratch/job.out" 2>"$scratch/job.err" || status=$?
  # The log, as `kubectl logs` shows it (the progress, then the document), read as
  # deploy/k8s/README.md says.
  cat "$scratch/job.err" "$scratch/job.out" | sed -n '/^{/,$p' >"$scratch/mesh.json"
  if [ "$status" = 0 ] && ! grep -q "^fperf-mesh: 3 servers behind $FPERF_MESH_SERVICE: " "$scratch/job.err"; then
    status="0 but printed no line naming the 3 servers"
  fi
  if [ "$status" != 0 ]; then
    fail "$what_e2e" "the script exited $status:
$(cat "$scratch/job.err" "$scratch/job.out")"
  elif ! verdict="$(mesh_verdict "$scratch/mesh.json" "127.0.0."{2,3,4}":$FPERF_PORT")"; then
    fail "$what_e2e" "${verdict##*$'\n'}
$(cat "$scratch/job.err"; head -c 2000 "$scratch/job.out")"
  else
    pass "$what_e2e" "off-diagonal cells: $verdict"
  fi
fi

# The same on a cluster without IPv4: the servers and the Job share a network namespace
# of their own whose loopback has three IPv6 addresses, and the Job's /etc/hosts gives
# the Service's name those addresses only.
v6=(fd00:f::2 fd00:f::3 fd00:f::4)
if [ -n "$why_no_e2e" ]; then
  skip "$what_e2e6" "$why_no_e2e"
elif ! unshare -n true 2>/dev/null; then
  skip "$what_e2e6" "no network namespaces here (unshare -n)"
else
  printf '::1 localhost\n' >"$scratch/etc/hosts6"
  printf "%s $FPERF_MESH_SERVICE\n" "${v6[@]}" >>"$scratch/etc/hosts6"
  cat >"$scratch/e2e6.sh" <<'EOF'
set -u
hosts=$1 job=$2 port=$3 logs=$4
shift 4
pids=""
trap 'kill $pids 2>/dev/null' EXIT
trap 'exit 143' TERM
ip link set lo up || exit 1
for a in fd00:f::2 fd00:f::3 fd00:f::4; do
  ip -6 addr add "$a/128" dev lo nodad || exit 1
  fperf "$@" -p "$port" -B "$a" >"$logs/server6-$a.out" 2>&1 &
  pids="$pids $!"
done
mount --bind "$hosts" /etc/hosts || exit 1
sh "$job"
EOF
  status=0
  PATH="$scratch/bin:$PATH" FPERF_PORT="$FPERF_PORT" FPERF_MESH_ARGS="$FPERF_MESH_ARGS" \
    timeout 120 unshare -m -n sh "$scratch/e2e6.sh" "$scratch/etc/hosts6" "$scratch/job.sh" \
    "$FPERF_PORT" "$scratch" "${args[@]}" >"$scratch/job6.out" 2>"$scratch/job6.err" || status=$?
  cat "$scratch/job6.err" "$scratch/job6.out" | sed -n '/^{/,$p' >"$scratch/mesh6.json"
  want=("${v6[@]/#/[}")
  want=("${want[@]/%/]:$FPERF_PORT}")
  if [ "$status" = 0 ] && ! grep -qF "fperf-mesh: 3 servers behind $FPERF_MESH_SERVICE: ${want[*]}" "$scratch/job6.err"; then
    status="0 but printed no line naming the 3 servers by their IPv6 addresses"
  fi
  if [ "$status" != 0 ]; then
    fail "$what_e2e6" "the script exited $status:
$(cat "$scratch/job6.err" "$scratch/job6.out")"
  elif ! verdict="$(mesh_verdict "$scratch/mesh6.json" "${want[@]}")"; then
    fail "$what_e2e6" "${verdict##*$'\n'}
$(cat "$scratch/job6.err"; head -c 2000 "$scratch/job6.out")"
  else
    pass "$what_e2e6" "off-diagonal cells: $verdict"
  fi
fi
finish
