# Simulated nodes on one machine, for the tests across nodes: each node is a network namespace
# (mgtrain-n1, mgtrain-n2, ...) whose processes call themselves n1, n2, ... (a UTS namespace of
# their own), joined by a bridge (mgtrain-br, 10.77.0.254) through one veth each (node nI at
# 10.77.0.I). Every node sees the same filesystem, as real nodes share a parallel filesystem: keep
# binaries, data and run directories outside /tmp. Needs root.
#   source nodes.sh; nodes_up 2 [--rate 1gbit]; node_run n1 mpirun ...; (nodes_down on exit)
# One set of simulated nodes per machine at a time: nodes_up waits while another live shell owns
# them, so another test on the machine cannot tear them down mid-run.

SIM_PREFIX=mgtrain
SIM_BRIDGE=$SIM_PREFIX-br
SIM_SUBNET=10.77.0.0/24
SIM_LOCK=/run/lock/$SIM_PREFIX-nodes.lock
SIM_OWNER=/run/lock/$SIM_PREFIX-nodes.owner
SIM_AGENT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/nsrsh

sim_ns() { echo "$SIM_PREFIX-$1"; }  # node n1 -> its network namespace

sim_fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Where this machine cannot make the nodes (not root, no network or mount namespaces): the
# caller's namespaces_unavailable when it has one (the tests, tests/e2e/lib.sh: a skip, or a
# failure with MGTRAIN_REQUIRE_NAMESPACES=1), else a failure.
sim_unavailable() {
  if declare -F namespaces_unavailable >/dev/null; then namespaces_unavailable "$@"; fi
  sim_fail "$@"
}

# Runs a command on node NODE: in its network namespace, with its host name and its /etc/hosts.
node_run() {  # node_run NODE COMMAND...
  local node=$1
  shift
  ip netns exec "$(sim_ns "$node")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" "$@"
}

# The MCA options that keep Open MPI's daemons and messages on the simulated network. The nodes
# share this machine's cores, more ranks than cores in all, while each node's slots say it is not
# oversubscribed: a rank waiting in a blocking collective must still yield its core, or it spins
# while the peer it waits for cannot run (default-mode steps about 13x slower, measured).
sim_mpirun_options() {
  echo "--mca plm_rsh_agent $SIM_AGENT --mca btl tcp,self,vader" \
    "--mca btl_tcp_if_include $SIM_SUBNET --mca oob_tcp_if_include $SIM_SUBNET --mca mpi_yield_when_idle 1"
}

# Makes this shell the nodes' owner, waiting up to 900 s while another live shell owns them. An
# owner file, not a lock held open: the processes a test starts would inherit a held lock, and
# any left behind by a crashed run would keep it for ever. A dead owner's nodes are leftovers.
sim_claim() {
  local owner
  mkdir -p "$(dirname "$SIM_LOCK")"
  for _ in $(seq 900); do
    # shellcheck disable=SC2094  # the lock only guards reading and writing the owner file
    if (
      flock 9
      owner=$(cat "$SIM_OWNER" 2>/dev/null || true)
      [ -n "$owner" ] && [ "$owner" != $$ ] && kill -0 "$owner" 2>/dev/null && exit 1
      echo $$ >"$SIM_OWNER"
    ) 9>"$SIM_LOCK"; then
      return 0
    fi
    sleep 1
  done
  sim_fail "the simulated nodes are still in use by process $(cat "$SIM_OWNER") after 900 s"
}

# Removes every simulated node, this run's or a crashed earlier run's: the processes in the nodes'
# namespaces (TERM, then KILL), the namespaces, veths, bridge and hosts files.
sim_remove_nodes() {
  local ns pids link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -x "$SIM_PREFIX-n[0-9]*" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      kill -TERM $pids 2>/dev/null || true
      for _ in $(seq 30); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] && break
        sleep 0.1
      done
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns delete "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -x "$SIM_PREFIX-v[0-9]*" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  ip link delete "$SIM_BRIDGE" 2>/dev/null || true
  rm -rf /etc/netns/"$SIM_PREFIX"-n[0-9]*
  rmdir /etc/netns 2>/dev/null || true  # only when nothing else is there
}

# Removes the nodes and gives up their ownership (nodes_up runs it on exit).
nodes_down() {
  sim_remove_nodes
  [ "$(cat "$SIM_OWNER" 2>/dev/null)" != $$ ] || rm -f "$SIM_OWNER"
}

# Brings up nodes n1..nN; --rate RATE limits each node's link in both directions (tc tbf).
# Ends with one line (sim_unavailable) where the machine cannot make namespaces (not root, a chroot,
# a kernel or container that refuses).
nodes_up() {  # nodes_up N [--rate RATE]
  local n=$1 rate="" i ns veth
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      *) sim_fail "nodes_up: unknown option $1" ;;
    esac
  done
  [ "$(id -u)" -eq 0 ] ||
    sim_unavailable "simulated nodes need root (network namespaces, a bridge); running as uid $(id -u)"
  sim_claim
  trap nodes_down EXIT
  sim_remove_nodes
  # What the nodes and their agent (nsrsh) use: a network namespace, entered with a host name and,
  # for a node's private directories, a mount namespace of its own.
  local probe=$SIM_PREFIX-probe err
  err=$( { ip netns add "$probe" && ip netns exec "$probe" unshare --uts --mount --propagation private true; } 2>&1) ||
    {
      ip netns delete "$probe" 2>/dev/null || true
      sim_unavailable "this machine cannot make network and mount namespaces: ${err//$'\n'/ }"
    }
  ip netns delete "$probe"
  ip link add "$SIM_BRIDGE" type bridge
  ip addr add 10.77.0.254/24 dev "$SIM_BRIDGE"
  ip link set "$SIM_BRIDGE" up
  for i in $(seq "$n"); do
    ns=$(sim_ns "n$i") veth=$SIM_PREFIX-v$i
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "${veth}p"
    ip link set "${veth}p" netns "$ns"
    ip link set "$veth" master "$SIM_BRIDGE"
    ip link set "$veth" up
    ip -n "$ns" addr add "10.77.0.$i/24" dev "${veth}p"
    ip -n "$ns" link set "${veth}p" up
    ip -n "$ns" link set lo up
    if [ -n "$rate" ]; then
      # The burst must hold at least rate/HZ, or the link reaches a fraction of the rate.
      tc qdisc add dev "$veth" root tbf rate "$rate" burst 512kb latency 20ms
      ip netns exec "$ns" tc qdisc add dev "${veth}p" root tbf rate "$rate" burst 512kb latency 20ms
    fi
    # `ip netns exec` binds this file over /etc/hosts: every node resolves every other by name.
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      echo "10.77.0.254 ctl"
      for j in $(seq "$n"); do echo "10.77.0.$j n$j"; done
    } >"/etc/netns/$ns/hosts"
  done
}

# Limits one node's link in both directions (tc tbf), e.g. a node behind a slower network path.
node_limit() {  # node_limit NODE RATE
  local i=${1#n} rate=$2
  tc qdisc replace dev "$SIM_PREFIX-v$i" root tbf rate "$rate" burst 512kb latency 20ms
  ip netns exec "$(sim_ns "$1")" tc qdisc replace dev "$SIM_PREFIX-v${i}p" root tbf rate "$rate" burst 512kb latency 20ms
}
