# A real Slurm (munge, slurmctld, slurmd from Debian's packages) in a private directory, for the
# tests: nothing in /etc is touched and clients find it through SLURM_CONF.
#   source cluster.sh; cluster_start DIR; ... sbatch ...; cluster_stop
# One node (localhost) by default; cluster_start DIR N runs one slurmd on each of the simulated
# nodes n1..nN that tests/multinode/nodes.sh brought up (2 CPUs each), and slurmctld as host
# "ctl" on their bridge. Each node gets its own /tmp, as real nodes have: PMIx's directories
# there would clash otherwise. The cluster's directory, and each PATH given after N (the build
# and source trees a job uses), stay visible on every node at the same path, under /tmp too
# (a clean clone in /tmp/ci): they are bound back over the node's own /tmp.
# (config_overrides lets 2 cores advertise 8 CPUs; MinJobAge=5
# keeps `sbatch --wait` polling every 2 s; no cgroups.)

cluster_start() {  # cluster_start DIR [NODES [PATH...]]
  CLUSTER_DIR=$1
  local nodes=${2:-0} i
  shift $(($# < 2 ? $# : 2))
  rm -rf "$CLUSTER_DIR"
  mkdir -p "$CLUSTER_DIR"/{state,spool,log,munge}
  chmod 0755 "$CLUSTER_DIR" "$CLUSTER_DIR/munge"
  mungekey --create --keyfile="$CLUSTER_DIR/munge/munge.key" >/dev/null 2>&1 ||
    { dd if=/dev/urandom of="$CLUSTER_DIR/munge/munge.key" bs=1024 count=1 2>/dev/null; }
  chmod 0600 "$CLUSTER_DIR/munge/munge.key"
  munged --force --socket="$CLUSTER_DIR/munge/munge.socket" --key-file="$CLUSTER_DIR/munge/munge.key" \
    --pid-file="$CLUSTER_DIR/munge/munged.pid" --log-file="$CLUSTER_DIR/log/munged.log" \
    --seed-file="$CLUSTER_DIR/munge/munged.seed" || return 1
  # Simulated nodes: per-node spool, pid and log files (%n is the node's name), and ports of their
  # own so that a one-node test cluster on this machine does not collide with this one.
  local controller=localhost\(127.0.0.1\) port=16817 node_files="" node_spool=""
  if [ "$nodes" -gt 0 ]; then
    controller=ctl\(10.77.0.254\) port=16827 node_files=-%n node_spool=/%n
  fi
  cat >"$CLUSTER_DIR/slurm.conf" <<CONF
ClusterName=mgtrain-test
SlurmctldHost=$controller
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CLUSTER_DIR/munge/munge.socket
StateSaveLocation=$CLUSTER_DIR/state
SlurmdSpoolDir=$CLUSTER_DIR/spool$node_spool
SlurmctldPidFile=$CLUSTER_DIR/slurmctld.pid
SlurmdPidFile=$CLUSTER_DIR/slurmd$node_files.pid
SlurmctldLogFile=$CLUSTER_DIR/log/slurmctld.log
SlurmdLogFile=$CLUSTER_DIR/log/slurmd$node_files.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
MinJobAge=5
KillWait=20
CONF
  if [ "$nodes" -eq 0 ]; then
    printf '%s\n' "NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN" \
      "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP" >>"$CLUSTER_DIR/slurm.conf"
  else
    for i in $(seq "$nodes"); do
      echo "NodeName=n$i NodeAddr=10.77.0.$i CPUs=2 State=UNKNOWN" >>"$CLUSTER_DIR/slurm.conf"
    done
    echo "PartitionName=sim Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP" >>"$CLUSTER_DIR/slurm.conf"
  fi
  export SLURM_CONF=$CLUSTER_DIR/slurm.conf
  if [ "$nodes" -eq 0 ]; then
    slurmctld -c || return 1
    slurmd -N localhost || return 1
  else
    # slurmctld runs only on a host named as the controller. nsenter, not `ip netns exec`, for
    # slurmd: the latter remounts /sys, and slurmd refuses to start without /sys/fs/cgroup.
    unshare --uts sh -c 'hostname ctl && exec slurmctld -c' || return 1
    local shared
    shared=$(cluster_paths_under_tmp "$CLUSTER_DIR" "$@")
    for i in $(seq "$nodes"); do
      # shellcheck disable=SC2016  # expanded by the node's shell
      nsenter --net="/run/netns/$(sim_ns "n$i")" unshare --uts --mount --propagation private \
        bash -c "$CLUSTER_NODE_SETUP"' && exec slurmd -N "$0"' "n$i" $shared || return 1
    done
  fi
  local want=idle
  [ "$nodes" -eq 0 ] || want=$(printf 'idle%.0s\n' $(seq "$nodes"))
  for _ in $(seq 60); do
    [ "$(sinfo -h -N -o %t 2>/dev/null)" = "$want" ] && return 0
    sleep 0.5
  done
  echo "the test cluster did not become idle:" >&2
  sinfo -N >&2 || true
  tail -n 20 "$CLUSTER_DIR"/log/*.log >&2
  return 1
}

# The given paths that lie under /tmp, made absolute (as given: a symlink is bound at its own
# name), one per word: what a node must see through its
# own /tmp. (Paths with spaces are not supported.)
cluster_paths_under_tmp() {
  local p real
  for p in "$@"; do
    real=$(cd "$p" && pwd) || return 1
    case $real in /tmp/*) echo "$real" ;; esac
  done
}

# Run by each node's shell in its own mount namespace, as `bash -c SETUP NODE PATH...`: names
# the host, puts a private tmpfs over /tmp, then binds each PATH back at the same place. Each path
# is opened before /tmp is covered, and the bind's source is that open directory
# (/proc/self/fd/N, not canonicalized: its name would lead into the new, empty /tmp).
# shellcheck disable=SC2016  # expanded by the node's shell
CLUSTER_NODE_SETUP='
  hostname "$0" || exit 1
  fds=()
  for p in "$@"; do exec {fd}<"$p" || exit 1; fds+=("$fd"); done
  mount -t tmpfs tmpfs /tmp || exit 1
  i=0
  for p in "$@"; do
    mkdir -p "$p" && mount --no-canonicalize --bind "/proc/self/fd/${fds[i]}" "$p" || exit 1
    fd=${fds[i]}; exec {fd}<&-; i=$((i + 1))
  done'

# Cancels job JOB once it trains (DIR, its checkpoint.dir, holds metrics), as a user's scancel
# would (SIGTERM to every rank), and waits until Slurm has let it go. Returns 1 when it never
# started training.
cluster_cancel_when_training() {  # cluster_cancel_when_training JOB DIR
  local job=$1 dir=$2
  # A hang guard with room for a loaded machine's start-up.
  for _ in $(seq 360); do
    [ -s "$dir/metrics.jsonl" ] && break
    sleep 0.5
  done
  [ -s "$dir/metrics.jsonl" ] || return 1
  scancel "$job"
  for _ in $(seq 120); do
    squeue -h -j "$job" 2>/dev/null | grep -q . || break
    sleep 0.5
  done
}

# Stops every daemon this cluster started: by pid file, then any slurmstepd that carries this
# cluster's SLURM_CONF in its environment.
cluster_stop() {
  [ -n "${CLUSTER_DIR:-}" ] || return 0
  local pids=()
  for f in "$CLUSTER_DIR"/slurmd*.pid "$CLUSTER_DIR/slurmctld.pid" "$CLUSTER_DIR/munge/munged.pid"; do
    [ -f "$f" ] && pids+=("$(cat "$f")")
  done
  for p in $(pgrep -x slurmstepd || true); do
    { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$CLUSTER_DIR/slurm.conf" && pids+=("$p")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
