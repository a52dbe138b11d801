#!/usr/bin/env bash
# Runs deploy/slurm/fperf-mesh.sbatch under a real single-node Slurm that it starts for
# the purpose: munged, slurmctld and slurmd from Debian (slurm-wlm, munge), run as root,
# on loopback, with their configuration, key, state and logs in a scratch directory
# (SLURM_CONF points there; nothing under /etc is read or changed). The cluster's one
# node is "localhost" with room for several tasks, so several fperf servers run on it,
# on different ports.
#   - the plumbing, with a stand-in for fperf that records how it was called: sbatch
#     runs the script, srun starts a server per task, each on its own port, with
#     --allow-mesh and the job's key; the mesh gets the host:port list of those servers;
#     the results land where the environment says; the servers stop and the job's key
#     and scratch files are gone when the job ends;
#   - end to end, with the fperf built here: the job writes the mesh's JSON document
#     (every server in `hosts`, an N×N matrix, a positive figure in every cell off the
#     diagonal) and its heatmap.
# Each job and each daemon has a time limit; the daemons are stopped on the way out,
# whatever happens. A check this host cannot run is printed as "skipped: WHY", never as
# passed. Exits 1 if a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

check_name=slurm
# shellcheck source=scripts/check-tally.sh
. scripts/check-tally.sh
what_plumbing="the batch script's servers, ports, key and results under Slurm (a stand-in fperf)"
what_mesh="the batch script's mesh under Slurm, end to end (3 servers on one node)"
skip_all() {
  skip "$what_plumbing" "$1"
  skip "$what_mesh" "$1"
  finish
  exit
}

[ "$(id -u)" -eq 0 ] || skip_all "needs root: Slurm's daemons run as root here"
for tool in munged slurmctld slurmd sbatch srun scontrol squeue; do
  command -v "$tool" >/dev/null ||
    skip_all "$tool is not installed (scripts/setup.sh --tests installs slurm-wlm and munge)"
done

scratch="$(mktemp -d /tmp/fperf-slurm.XXXXXX)"
chmod 711 "$scratch"
daemons=()
stop_all() {
  local pid
  if [ -n "${SLURM_CONF:-}" ] && [ -e "$SLURM_CONF" ]; then
    timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
  fi
  for pid in "${daemons[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$scratch"
}
trap stop_all EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# munged, with its own key and socket.
mkdir -m 700 "$scratch/munge"
head -c 1024 /dev/urandom >"$scratch/munge/munge.key"
chmod 400 "$scratch/munge/munge.key"
socket="$scratch/munge/munge.socket"
munged --foreground --force --key-file="$scratch/munge/munge.key" --socket="$socket" \
  --pid-file="$scratch/munge/munged.pid" --log-file="$scratch/munge/munged.log" \
  --seed-file="$scratch/munge/munged.seed" >"$scratch/munge/munged.out" 2>&1 &
daemons+=($!)
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || skip_all "munged did not start: $(tail -n 1 "$scratch/munge/munged.log" "$scratch/munge/munged.out" 2>/dev/null | grep . | tail -n 1)"

# slurmctld and slurmd, on ports picked at random so they meet no other Slurm.
host="$(hostname -s)"
ctld_port=$((20000 + RANDOM % 10000))
slurmd_port=$((ctld_port + 1))
mkdir -p "$scratch/ctld" "$scratch/slurmd" "$scratch/jobs"
chmod 777 "$scratch/jobs"
: >"$scratch/plugstack.conf"
cat >"$scratch/slurm.conf" <<EOF
ClusterName=fperfcheck
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$scratch/ctld
SlurmdSpoolDir=$scratch/slurmd
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd.pid
SlurmctldLogFile=$scratch/slurmctld.log
SlurmdLogFile=$scratch/slurmd.log
PlugStackConfig=$scratch/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
NodeName=localhost NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF="$scratch/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >"$scratch/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$scratch/slurmd.out" 2>&1 &
daemons+=($!)
state=""
for _ in $(seq 60); do
  state="$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null || true)"
  [ "$state" = idle ] && break
  sleep 0.5
done
if [ "$state" != idle ]; then
  why="$(cat "$scratch/slurmctld.log" "$scratch/slurmd.log" "$scratch/slurmctld.out" "$scratch/slurmd.out" 2>/dev/null |
    grep -iE 'error|fatal' | tail -n 1)"
  skip_all "Slurm did not start here (the node is '${state:-unknown}'): ${why:-no error logged}"
fi
say "Slurm runs: slurmctld on 127.0.0.1:$ctld_port, node localhost idle"

# run_job NAME TIMEOUT SBATCH-OPTION... -- SCRIPT-ARGUMENT...: submits the batch script
# with the environment given by the caller, waits for the job (at most TIMEOUT seconds,
# then cancels it), and prints the job's id; the job's output is $scratch/jobs/NAME.out.
run_job() {
  local name=$1 limit=$2 id state=""
  shift 2
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  id="$(timeout 30 sbatch --parsable --chdir="$scratch/jobs" --output="$scratch/jobs/$name.out" \
    --time=5 "${opts[@]}" "$repo/deploy/slurm/fperf-mesh.sbatch" "$@")" || return 1
  id="${id%%;*}"
  for _ in $(seq $((limit * 2))); do
    state="$(timeout 10 squeue -h -j "$id" -o %T 2>/dev/null || echo unknown)"
    [ -z "$state" ] && break
    sleep 0.5
  done
  if [ -n "$state" ]; then
    timeout 10 scancel "$id" 2>/dev/null || true
    echo "the job was still $state after ${limit}s; cancelled" >>"$scratch/jobs/$name.out"
  fi
  echo "$id"
}
# The job's exit code from slurmctld ("0:0" when it exited 0).
job_exit() {
  timeout 10 scontrol show job "$1" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'
}

# The plumbing, with a stand-in for fperf.
stand_in="$scratch/stand-in"
mkdir -m 755 "$stand_in"
cat >"$stand_in/fperf" <<'EOF'
#!/bin/bash
# Records its arguments; as a server, says it listens and waits for SIGTERM; as the
# mesh, prints a document naming its hosts and writes the --plot file.
log="${FPERF_STAND_IN_LOG:?}"
if [ "${1:-}" = -s ]; then
  key="$(printf '%s\n' "$@" | sed -n '/^--auth-key$/{n;p}')"
  echo "server $(printf '%q ' "$@")key=$(stat -c %a "$key" 2>/dev/null) localid=$SLURM_LOCALID" >>"$log"
  trap 'echo "server stopped $SLURM_LOCALID" >>"$log"; exit 0' TERM
  echo "Server listening on 0.0.0.0:28444"
  while :; do sleep 0.2; done
fi
[ "${1:-}" = mesh ] || exit 2
echo "mesh $(printf '%q ' "$@")" >>"$log"
hosts=() plot="" csv=""
shift
while [ $# -gt 0 ]; do
  case "$1" in
    --auth-key|--plot|--csv|--time)
      [ "$1" = --plot ] && plot=$2
      [ "$1" = --csv ] && csv=$2
      shift 2 ;;
    -*) shift ;;
    *) hosts+=("\"$1\""); shift ;;
  esac
done
echo "<svg/>" >"$plot"
echo "csv" >"$csv"
(IFS=,; echo "{\"hosts\": [${hosts[*]}]}")
EOF
chmod 755 "$stand_in/fperf"
log="$scratch/jobs/stand-in.log"
: >"$log"
chmod 666 "$log"
base=$((30000 + RANDOM % 20000))
id="$(FPERF="$stand_in/fperf" FPERF_STAND_IN_LOG="$log" FPERF_PORT=$base FPERF_PORT_STRIDE=7 \
  FPERF_MESH_DIR="$scratch/jobs" FPERF_MESH_PLOT="$scratch/jobs/plumbing.svg" \
  FPERF_MESH_CSV="$scratch/jobs/plumbing.csv" FPERF_SERVER_ARGS="--max-time 60" \
  run_job plumbing 60 -N 1 --ntasks-per-node=4 -- --time 3)" || id=""
problems=()
json="$scratch/jobs/fperf-mesh-$id.json"
expect=()
for l in 0 1 2 3; do expect+=("localhost:$((base + l * 7))"); done
[ -n "$id" ] || problems+=("sbatch refused the script")
[ "$(job_exit "$id")" = 0:0 ] || problems+=("the job's exit code is '$(job_exit "$id")', not 0:0")
for l in 0 1 2 3; do
  grep -q "^server -s -p $((base + l * 7)) --allow-mesh --auth-key [^ ]*/key --max-time 60 key=600 localid=$l\$" "$log" ||
    problems+=("no server $l on port $((base + l * 7)) with --allow-mesh, a key only its user reads and FPERF_SERVER_ARGS")
  grep -q "^server stopped $l\$" "$log" || problems+=("server $l was not stopped with SIGTERM")
done
[ "$(grep -c '^server -s' "$log")" = 4 ] || problems+=("$(grep -c '^server -s' "$log") servers started, not 4")
grep -q "^mesh mesh --auth-key [^ ]*/key --json --plot $scratch/jobs/plumbing.svg --csv $scratch/jobs/plumbing.csv --time 3 ${expect[*]} \$" "$log" ||
  problems+=("the mesh was not run with the key, --json, the plot, the CSV, the job's arguments, then the host list: ${expect[*]}")
grep -qF "$(printf '"%s",' "${expect[@]}" | sed 's/,$//')" "$json" 2>/dev/null ||
  problems+=("the mesh's document is not in $json")
[ -s "$scratch/jobs/plumbing.svg" ] || problems+=("no heatmap at FPERF_MESH_PLOT")
[ -s "$scratch/jobs/plumbing.csv" ] || problems+=("no CSV at FPERF_MESH_CSV")
leftover="$(find "$scratch/jobs" -name '.fperf-mesh-*')"
[ -z "$leftover" ] || problems+=("the job left its scratch files: $leftover")
if [ ${#problems[@]} -eq 0 ]; then
  pass "$what_plumbing"
else
  fail "$what_plumbing" "$(printf '%s\n' "${problems[@]}"; echo "--- the job's output:"
    cat "$scratch/jobs/plumbing.out" 2>/dev/null; echo "--- the stand-in's log:"; cat "$log")"
fi

# End to end, with the fperf built here.
fperf="$repo/target/release/fperf"
if [ ! -x "$fperf" ]; then
  say "building fperf (cargo build --release)"
  timeout 1800 cargo build --release --quiet
fi
if ! mesh_help="$("$fperf" mesh --help 2>&1)"; then
  skip "$what_mesh" "this fperf has no mesh command: ${mesh_help%%$'\n'*}"
  finish
  exit
fi
cp "$fperf" "$scratch/fperf"
chmod 755 "$scratch/fperf"
base=$((30000 + RANDOM % 20000))
id="$(FPERF="$scratch/fperf" FPERF_PORT=$base FPERF_MESH_DIR="$scratch/jobs" \
  run_job mesh 240 -N 1 --ntasks-per-node=3 -- --time 1)" || id=""
json="$scratch/jobs/fperf-mesh-$id.json"
svg="$scratch/jobs/fperf-mesh-$id.svg"
problems=()
[ -n "$id" ] || problems+=("sbatch refused the script")
[ "$(job_exit "$id")" = 0:0 ] || problems+=("the job's exit code is '$(job_exit "$id")', not 0:0")
if ! verdict="$(python3 - "$json" "$base" <<'EOF' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
base = int(sys.argv[2])
want = [f"localhost:{base + 100 * l}" for l in range(3)]
assert doc["hosts"] == want, f"hosts {doc['hosts']}, not {want}"
m = doc["matrix"]
assert len(m) == 3 and all(len(row) == 3 for row in m), f"the matrix is not 3x3: {m}"
for i in range(3):
    for j in range(3):
        v = m[i][j]
        if i == j:
            assert v is None, f"cell {i},{j} is {v}, not null"
        else:
            assert isinstance(v, (int, float)) and v > 0, f"cell {i},{j} is {v}"
print(" ".join(f"{v / 1e9:.1f}" for row in m for v in row if v is not None), "Gbit/s")
EOF
)"; then
  problems+=("the document: ${verdict##*$'\n'}")
fi
grep -q '<svg' "$svg" 2>/dev/null || problems+=("no heatmap at $svg")
if [ ${#problems[@]} -eq 0 ]; then
  pass "$what_mesh"
  echo "    off-diagonal cells: $verdict"
else
  fail "$what_mesh" "$(printf '%s\n' "${problems[@]}"; echo "--- the job's output:"
    cat "$scratch/jobs/mesh.out" 2>/dev/null; echo "--- the document:"; head -c 2000 "$json" 2>/dev/null)"
fi
finish
