#!/usr/bin/env bash
# mgtrain across simulated nodes (nodes.sh), launched as on a cluster: `mpirun --hostfile` from
# node n1 over 2 nodes x 2 ranks, each link limited to 1 Gbit/s, against 4 ranks on this machine.
#   deterministic MODEL: sync.deterministic = true gives the same /params bits across nodes.
#   default: the default mode reaches the same test accuracy (within 0.01); mgtrain doctor
#     reports each rank's node.
#   doctor: mgtrain doctor measures the links between 3 nodes and names the one limited to a
#     tenth of the others' rate.
#   mixed_builds: ranks on n2 running another build than rank 0's are named before step 1.
#   unshared_checkpoints: a checkpoint.dir that n2 does not share with n1 is named before step 1.
#   hierarchical: across the nodes the all-reduce through one leader per node, and the one through
#     each node's shared memory, give the flat one's result (parameters within FP tolerance, the
#     same accuracy), sending no more bytes over the links, and the bfloat16 wire under 0.7x.
#   unreachable: a hostfile naming a node that cannot reach mpirun fails promptly, naming it.
#   lost_link, killed_node, stopped_node: node n2's link goes down, or its mgtrain processes are
#     killed or stopped, mid-run: the job ends promptly naming n2, no process is left, and the run
#     resumes on n1 alone.
#   launch: mgtrain launch loses a node by its link (another node waits: the ranks left cannot
#     split the batch), then another by its processes killed; the waiting node and the first, its
#     link back, make the third attempt, which finishes the deterministic run with the bits of a
#     run never interrupted.
#   launch_default: the same in the default mode: n3's processes killed mid-run, n2 waits out the
#     restart (3 ranks cannot split the global batch), and the run finished on n1 reaches a test
#     accuracy within 0.01 of a run never interrupted.
#   launch_mid_write: rank 0 killed while it writes a checkpoint: the restart resumes from the one
#     before, on the node left and a spare node --max-nodes kept out, with the same bits at the end.
#   slurm_launch: the same as a Slurm job's batch script: srun on the allocation's nodes, n2's tasks
#     killed, the job started again inside the allocation on n1.
#   slurm: a real Slurm with one slurmd per node; `sbatch -N 2` of both example scripts trains
#     on 2 nodes x 2 ranks; scancel of a deterministic 2-node job writes a final checkpoint, and
#     the job resubmitted on one node with --resume latest ends with the bits of a run never
#     interrupted.
source "$(dirname "$0")/../e2e/lib.sh"
source "$(dirname "$0")/nodes.sh"

# Runs mgtrain under mpirun started on n1, with a hard outer limit so a hang is a failure.
across_nodes() {  # across_nodes HOSTFILE NP SECONDS ARGS...
  local hosts=$1 np=$2 limit=$3
  shift 3
  # shellcheck disable=SC2046  # the MCA options are separate words
  node_run n1 timeout --kill-after=10 "$limit" mpirun --hostfile "$hosts" -np "$np" $(sim_mpirun_options) \
    "$MGTRAIN" "$@"
}

# Bytes that crossed node n2's link (both directions), to show the ranks did talk over the network.
link_bytes() {
  local dir=/sys/class/net/$SIM_PREFIX-v2/statistics
  echo $(($(cat $dir/rx_bytes) + $(cat $dir/tx_bytes)))
}

# Trains on 4 ranks here and on 2 nodes x 2 ranks; checks where the ranks ran and that the
# gradients crossed the network. Usage: both_ways STEPS [overrides...]
both_ways() {
  local steps=$1
  shift
  run_np 4 600 train --config run.ini --train.max_steps="$steps" --checkpoint.dir="$WORK/one" "$@" >one.log 2>&1 ||
    { cat one.log; fail "4 ranks on one node"; }
  grep -q "^mgtrain .*: 4 rank(s) on 1 node(s): " one.log || { head -n 3 one.log; fail "the one-node run's banner"; }
  local before
  before=$(link_bytes)
  across_nodes hosts 4 600 train --config run.ini --train.max_steps="$steps" --checkpoint.dir="$WORK/two" "$@" \
    >two.log 2>&1 || { cat two.log; fail "2 nodes x 2 ranks"; }
  head -n 1 two.log
  grep -q "^mgtrain .*: 4 rank(s) on 2 node(s): n1 (ranks 0-1), n2 (ranks 2-3)$" two.log ||
    { head -n 3 two.log; fail "the banner does not show ranks 0-1 on n1 and 2-3 on n2"; }
  # Each step all-reduces the gradients: far more than the MLP's 0.4 MB of parameters go over n2's link.
  local crossed=$(($(link_bytes) - before))
  echo "bytes over n2's link: $crossed"
  [ "$crossed" -gt 4000000 ] || fail "only $crossed bytes crossed n2's link: the ranks did not talk over the network"
}

case $1 in
  deterministic)
    model=$2 steps=100
    nodes_up 2 --rate 1gbit
    printf 'n1 slots=2\nn2 slots=2\n' >hosts
    write_config run.ini "[model]" "name = $model" "[sync]" "deterministic = true"
    both_ways $steps
    one=$(group_hash "$WORK/one/step-$steps.h5" /params)
    two=$(group_hash "$WORK/two/step-$steps.h5" /params)
    echo "/params after $steps steps: one node $one, two nodes $two"
    [ "$one" = "$two" ] || fail "deterministic mode: 2 nodes x 2 ranks differ from 4 ranks on one node"
    ;;
  default)
    steps=300
    nodes_up 2 --rate 1gbit
    printf 'n1 slots=2\nn2 slots=2\n' >hosts
    write_config run.ini
    both_ways $steps
    one=$(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' one.log)
    two=$(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' two.log)
    echo "test accuracy after $steps steps: one node $one, two nodes $two"
    [ -n "$one" ] && [ -n "$two" ] || fail "a run printed no test accuracy"
    awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; exit !(d <= 0.01 && d >= -0.01) }' ||
      fail "test accuracy across nodes ($two) is more than 0.01 from one node's ($one)"
    # mgtrain doctor across the nodes: one row per rank with its host and node-local rank.
    across_nodes hosts 4 120 doctor >doctor.log 2>&1 || { cat doctor.log; fail "mgtrain doctor across nodes"; }
    for row in "0 n1 0/2" "1 n1 1/2" "2 n2 0/2" "3 n2 1/2"; do
      awk -v row="$row" '$1 " " $2 " " $3 == row { found = 1 } END { exit !found }' doctor.log ||
        { cat doctor.log; fail "mgtrain doctor has no row '$row' (rank, host, local rank)"; }
    done
    ;;
  doctor)
    # Three nodes, one rank each: every pair of node leaders measured. First at full speed (the
    # verdict names no link), then with n3 limited to 100 Mbit/s while n1 and n2 keep 1 Gbit/s.
    nodes_up 3 --rate 1gbit
    printf 'n1 slots=1\nn2 slots=1\nn3 slots=1\n' >hosts
    across_nodes hosts 3 120 doctor >even.log 2>&1 || { cat even.log; fail "mgtrain doctor on even links"; }
    cat even.log
    for link in "n1 <-> n2" "n1 <-> n3" "n2 <-> n3"; do
      grep -q "^  $link .* GB/s .* us$" even.log || fail "mgtrain doctor did not measure $link"
    done
    node_limit n3 100mbit
    set +e
    across_nodes hosts 3 120 doctor >slow.log 2>&1
    rc=$?
    set -e
    cat slow.log
    [ $rc -eq 1 ] || fail "mgtrain doctor exited $rc with n3 limited to 100 Mbit/s, expected 1 (a problem)"
    grep -q "^  - node n3 is slow to reach every other node: n1 .* GB/s, n2 .* GB/s; the fastest link between nodes (n1 <-> n2)" slow.log ||
      fail "the verdict does not name node n3 as slow"
    [ "$(grep -c '^  - ' slow.log)" = 1 ] || fail "the verdict names more than node n3"
    ;;
  mixed_builds)
    # n2's ranks run a copy of mgtrain whose GNU build ID differs in one byte: as another build.
    nodes_up 2
    write_config run.ini
    # Beside a lib/ that is the build's: its RUNPATH ($ORIGIN/../lib) must find the same libraries.
    mkdir -p other/bin
    ln -sfn "$(cd "$(dirname "$MGTRAIN")/../lib" && pwd)" other/lib
    cp "$MGTRAIN" other-mgtrain
    id=$(readelf -n other-mgtrain | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p')
    [ -n "$id" ] || fail "mgtrain has no GNU build ID"
    python3 - "$id" <<'PY'
import sys
build_id = bytes.fromhex(sys.argv[1])
binary = open("other-mgtrain", "rb").read()
assert binary.count(build_id) == 1, "the build ID is not in the file once"
open("other-mgtrain", "wb").write(binary.replace(build_id, build_id[:-1] + bytes([build_id[-1] ^ 0xFF])))
PY
    chmod +x other-mgtrain
    mv other-mgtrain other/bin/mgtrain
    set +e
    # shellcheck disable=SC2046  # the MCA options are separate words
    node_run n1 timeout --kill-after=10 120 mpirun $(sim_mpirun_options) \
      -np 2 --host n1:2 "$MGTRAIN" train --config run.ini --train.max_steps=5 --checkpoint.dir="$WORK/ckpt" : \
      -np 2 --host n2:2 "$WORK/other/bin/mgtrain" train --config run.ini --train.max_steps=5 \
      --checkpoint.dir="$WORK/ckpt" >out.log 2>&1
    rc=$?
    set -e
    cat out.log
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "mixed builds: exit $rc"
    one_error_line out.log | grep -q "ranks 2,3 on n2 run another mgtrain build than rank 0 on n1: rank 0 has executable [0-9a-f]*, rank [23] has executable [0-9a-f]*\. " ||
      fail "the error does not name ranks 2,3 on n2 as another build"
    [ ! -e "$WORK/ckpt/step-5.h5" ] || fail "mixed builds trained"
    ;;
  unshared_checkpoints)
    # n2 sees an empty directory of its own at checkpoint.dir's path, as on a node-local disk.
    nodes_up 2
    printf 'n1 slots=2\nn2 slots=2\n' >hosts
    write_config run.ini
    mkdir -p "$WORK/ckpt"
    set +e
    SIM_PRIVATE_DIR="n2:$WORK/ckpt" across_nodes hosts 4 120 train --config run.ini --train.max_steps=5 \
      --checkpoint.dir="$WORK/ckpt" >out.log 2>&1
    rc=$?
    set -e
    cat out.log
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "unshared checkpoint.dir: exit $rc"
    one_error_line out.log |
      grep -q "checkpoint.dir '$WORK/ckpt': ranks 2,3 on n2 do not see the file rank 0 on n1 wrote there" ||
      fail "the error does not name ranks 2,3 on n2"
    [ -z "$(ls -A "$WORK/ckpt" | grep -vx '\.lock')" ] || { ls -la "$WORK/ckpt"; fail "files left in checkpoint.dir"; }
    ;;
  hierarchical)
    steps=200
    nodes_up 2 --rate 1gbit
    printf 'n1 slots=2\nn2 slots=2\n' >hosts
    write_config run.ini
    declare -A crossed
    # off: flat through MPI; on: through one leader per node; bf16: that with the bfloat16 wire;
    # shm: the default, summed in each node's shared memory, each local rank's part across nodes.
    for form in off on bf16 shm; do
      wire=fp32 hier=$form shm=off
      [ $form = bf16 ] && wire=bf16 hier=on
      [ $form = shm ] && hier=off shm=on
      before=$(link_bytes)
      across_nodes hosts 4 600 train --config run.ini --train.max_steps=$steps --checkpoint.dir="$WORK/$form" \
        --sync.hierarchical=$hier --sync.wire=$wire --sync.shared_memory=$shm >$form.log 2>&1 ||
        { cat $form.log; fail "2 nodes x 2 ranks, $form"; }
      crossed[$form]=$(($(link_bytes) - before))
      echo "hierarchical $hier, wire $wire, shared memory $shm: $(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' \
        $form.log) test accuracy, ${crossed[$form]} bytes over n2's link"
    done
    off=$(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' off.log)
    for form in on shm; do
      "$MGTRAIN" compare off/step-$steps.h5 $form/step-$steps.h5 --rtol 1e-3 >compare.log 2>&1 ||
        { cat compare.log; fail "$form: parameters differ from the flat all-reduce's beyond rtol 1e-3"; }
      acc=$(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' $form.log)
      awk -v a="$off" -v b="$acc" 'BEGIN { d = a - b; exit !(d <= 0.005 && d >= -0.005) }' ||
        fail "$form: test accuracy $acc differs from the flat all-reduce's ($off)"
      # One copy of the gradient crosses n2's link each way, through the leader or in the local
      # ranks' parts. (Open MPI's flat all-reduce at this size halves within the node first, so it
      # sends no more: measured equal.)
      [ $((crossed[$form] * 20)) -le $((crossed[off] * 21)) ] ||
        fail "$form: ${crossed[$form]} bytes crossed n2's link, flat ${crossed[off]}: expected no more"
    done
    [ $((crossed[bf16] * 10)) -lt $((crossed[on] * 7)) ] ||
      fail "the bf16 wire sent ${crossed[bf16]} bytes over n2's link, fp32 ${crossed[on]}: expected under 0.7x"
    ;;
  unreachable)
    # n3's link is down: the daemon mpirun starts there cannot call back. Open MPI says which
    # node failed (its own message) and mpirun ends with an error, well within the limit.
    nodes_up 3
    ip link set "$SIM_PREFIX-v3" down
    printf 'n1 slots=2\nn3 slots=2\n' >hosts
    write_config run.ini
    start=$SECONDS
    set +e
    across_nodes hosts 4 120 train --config run.ini --train.max_steps=10 >out.log 2>&1
    rc=$?
    set -e
    cat out.log
    echo "mpirun exited with $rc after $((SECONDS - start)) s"
    [ $rc -ne 0 ] || fail "mpirun succeeded with node n3 unreachable"
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "mpirun hung with node n3 unreachable (killed at 120 s)"
    grep -q "Local host: *n3" out.log || fail "Open MPI's message does not name the unreachable node n3"
    ;;
  slurm)
    nodes_up 2
    source "$(dirname "$0")/../slurm/cluster.sh"
    trap 'cluster_stop; nodes_down' EXIT
    # The nodes' own /tmp would hide a build tree under /tmp (a clean clone in CI): the build and
    # source trees stay visible on every node.
    cluster_start "$WORK/cluster" 2 "$WORK" "$DATA_DIR" "$(dirname "$MGTRAIN")/.." "$EXAMPLES" ||
      fail "could not bring up the test cluster on nodes n1, n2"
    # The jobs' environment (sbatch passes it on): Open MPI on the simulated network.
    export OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=$SIM_SUBNET \
      OMPI_MCA_oob_tcp_if_include=$SIM_SUBNET OMPI_MCA_mpi_yield_when_idle=1
    write_config run.ini
    export MGTRAIN CONFIG=run.ini
    for style in mpirun srun; do
      out=$(timeout 300 sbatch --parsable --wait --nodes=2 --ntasks=4 --ntasks-per-node=2 --chdir="$WORK" \
        --output="$WORK/$style-%j.log" "$EXAMPLES/slurm/train_$style.sbatch" --train.max_steps=30 \
        --train.log_every=10 --checkpoint.dir="runs/%j") ||
        { cat "$WORK"/$style-*.log; fail "sbatch --wait -N 2 of the $style example failed"; }
      job=${out%%;*}
      log="$WORK/$style-$job.log"
      echo "== $style: job $job"
      head -n 1 "$log"
      tail -n 1 "$log"
      grep -q "^mgtrain .*: 4 rank(s) on 2 node(s): n1 (ranks 0-1), n2 (ranks 2-3)$" "$log" ||
        fail "$style: the banner does not show ranks 0-1 on n1 and 2-3 on n2"
      grep -q "^done: 30 steps" "$log" || fail "$style: the log does not end with the run's summary"
      [ -f "$WORK/runs/$job/step-30.h5" ] || fail "$style: no checkpoint in runs/$job"
    done

    # scancel of a running 2-node job: SIGTERM to every rank on both nodes, a final checkpoint.
    write_config det.ini "[sync]" "deterministic = true"
    export CONFIG=det.ini
    job=$(sbatch --parsable --nodes=2 --ntasks=4 --ntasks-per-node=2 --chdir="$WORK" --output="$WORK/long-%j.log" \
      "$EXAMPLES/slurm/train_srun.sbatch" --checkpoint.dir="$WORK/long" --train.epochs=40 --train.log_every=20)
    cluster_cancel_when_training "$job" "$WORK/long" ||
      { cat "$WORK"/long-*.log; fail "the 2-node job never started training"; }
    log="$WORK/long-$job.log"
    echo "== cancelled 2-node job $job"
    tail -n 2 "$log"
    grep -q "^mgtrain .*: 4 rank(s) on 2 node(s): n1 (ranks 0-1), n2 (ranks 2-3)$" "$log" ||
      fail "the cancelled job did not run on 2 nodes"
    stopped_at=$(sed -n 's/.*stopped by signal 15 at step \([0-9]*\).*/\1/p' "$log")
    [ -n "$stopped_at" ] || { cat "$log"; fail "the cancelled 2-node job did not stop cleanly"; }
    [ "$(cat "$WORK/long/latest")" = "step-$stopped_at.h5" ] ||
      fail "latest does not name the final checkpoint step-$stopped_at.h5"

    # Resubmitted on one node: it continues from there to 40 steps further.
    steps=$((stopped_at + 40))
    out=$(timeout 300 sbatch --parsable --wait --nodes=1 --ntasks=2 --chdir="$WORK" --output="$WORK/resume-%j.log" \
      "$EXAMPLES/slurm/train_srun.sbatch" --checkpoint.dir="$WORK/long" --train.epochs=40 --train.log_every=20 \
      --train.max_steps=$steps --resume latest) || { cat "$WORK"/resume-*.log; fail "the 1-node resubmission failed"; }
    log="$WORK/resume-${out%%;*}.log"
    tail -n 1 "$log"
    grep -q "^mgtrain .*: 2 rank(s) on 1 node(s): n[12] (ranks 0-1)$" "$log" || fail "the resubmission did not run on 1 node"
    grep -q "resumed from step $stopped_at" "$log" || fail "the resubmission did not resume from step $stopped_at"
    run_np 2 600 train --config det.ini --train.epochs=40 --train.max_steps=$steps --checkpoint.dir="$WORK/whole" \
      --checkpoint.every_steps=0 >whole.log 2>&1 || { cat whole.log; fail "the uninterrupted run"; }
    resumed=$(group_hash "$WORK/long/step-$steps.h5" /params)
    whole=$(group_hash "$WORK/whole/step-$steps.h5" /params)
    echo "/params after $steps steps: $stopped_at on 2 nodes + the rest on 1 node $resumed, uninterrupted $whole"
    [ "$resumed" = "$whole" ] || fail "cancelled on 2 nodes and resumed on 1, the run differs from an uninterrupted one"
    ;;
  lost_link | killed_node | stopped_node)
    # 2 nodes x 2 ranks lose node n2 mid-run: its link goes down (from the bridge's side), every
    # mgtrain process on it is killed, or every one is stopped (a hung machine, which mpirun cannot
    # see: mgtrain's deadline ends the job). The whole job must end within comm.timeout_s + 30 s
    # with a line naming n2, leave no process on either node, leave a checkpoint that loads, and
    # the run must resume on n1 alone.
    timeout_s=20
    nodes_up 2
    # mpirun's daemons probe their links every 2 s after 5 s idle and give one up after 3 silent
    # probes: mpirun then ends the job about 11 s after losing a node, and n2's daemon ends itself.
    # Without this (probes after 300 s idle), or once mpirun has sent to the lost daemon, it waits
    # for TCP to give up: a quarter of an hour.
    export OMPI_MCA_oob_tcp_keepalive_time=5 OMPI_MCA_oob_tcp_keepalive_intvl=2 OMPI_MCA_oob_tcp_keepalive_probes=3
    printf 'n1 slots=2\nn2 slots=2\n' >hosts
    printf 'n1 slots=2\n' >hosts1
    write_config run.ini "[train]" "epochs = 40" "log_every = 20" "[checkpoint]" "every_steps = 200" \
      "[comm]" "timeout_s = $timeout_s"
    across_nodes hosts 4 $((timeout_s + 150)) train --config run.ini >out.log 2>&1 &
    job=$!
    for _ in $(seq 240); do
      [ -f "$WORK/ckpt/latest" ] && break
      sleep 0.5
    done
    [ -f "$WORK/ckpt/latest" ] || { cat out.log; fail "the job wrote no checkpoint"; }
    start=$SECONDS
    if [ "$1" = lost_link ]; then
      ip link set "$SIM_PREFIX-v2" down
    else
      signal=KILL
      [ "$1" = killed_node ] || signal=STOP
      for p in $(ip netns pids "$(sim_ns n2)"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = mgtrain ] && kill -$signal "$p"
      done
    fi
    set +e
    wait $job
    rc=$?
    set -e
    took=$((SECONDS - start))
    grep -v "^epoch\|^step" out.log | tail -n 30
    echo "the job ended with status $rc $took s after losing n2"
    [ $rc -ne 0 ] || fail "the job succeeded without node n2"
    [ $took -le $((timeout_s + 30)) ] || fail "the job took $took s to end, more than comm.timeout_s + 30 s"
    # No process of the job is left on either node; n2's link comes back first, as a repaired
    # link would, to show that nothing there lingers waiting for it.
    [ "$1" = killed_node ] || ip link set "$SIM_PREFIX-v2" up
    left=""
    for _ in $(seq 30); do
      left=$(ip netns pids "$(sim_ns n1)"; ip netns pids "$(sim_ns n2)")
      [ -z "$left" ] && break
      sleep 1
    done
    echo "processes left on the nodes: ${left:-none}"
    # shellcheck disable=SC2086  # one pid a word
    [ -z "$left" ] || { ps -o pid,etimes,args -p "$(echo $left | tr ' ' ,)"; fail "processes are left on the nodes"; }
    # Open MPI's line names the lost node (and, for killed processes, a rank on it); mgtrain's
    # watchdog names the stopped node's ranks and the node.
    case $1 in
      lost_link)
        grep -q "Remote daemon: .* on node n2$" out.log || fail "no line names the lost node n2"
        # mpirun ends n1's ranks with SIGTERM, a second before SIGKILL: they name whom they waited for.
        grep -E -q "mgtrain: \[rank [01]\] signal 15 came after [0-9]+ s waiting at step [0-9]+ in .* for (ranks 2, 3, which did not answer a roll call: stuck or gone; on node n2 \(all of its ranks: the node or its link is lost\)|rank [23], which did not answer a roll call: stuck or gone; on node n2)$" out.log ||
          fail "no line of mgtrain's names the ranks of node n2"
        ;;
      killed_node)
        grep -q "process rank [23] with PID [0-9]* on node n2 exited on signal 9" out.log ||
          fail "no line names the killed rank on node n2"
        ;;
      stopped_node)
        # Both of n2's ranks, or, where rank 0 waits for its one peer on n2 (the all-reduce through
        # shared memory, each local rank's part across the nodes, or through the leaders), rank 2.
        grep -E -q "mgtrain: error: \[rank 0\] timed out after $timeout_s s at step [0-9]+ in .*, waiting for (ranks 2, 3, which never reached it: stuck or gone; on node n2 \(all of its ranks: the node or its link is lost\)|rank 2, which never reached it: stuck or gone; on node n2) \(comm.timeout_s\)$" out.log ||
          fail "mgtrain's line does not name node n2 and its ranks"
        ;;
    esac
    # The last checkpoint loads, and the run resumes from it on n1 alone.
    last=$(cat "$WORK/ckpt/latest")
    "$MGTRAIN" eval --checkpoint "$WORK/ckpt/$last" --data "$DATA_DIR/test.h5" >eval.log 2>&1 ||
      { cat eval.log; fail "the last checkpoint $last does not load"; }
    grep "accuracy" eval.log
    step=${last#step-}
    step=${step%.h5}
    across_nodes hosts1 2 300 train --config run.ini --resume latest --train.max_steps=$((step + 20)) >resume.log 2>&1 ||
      { cat resume.log; fail "resuming on n1 alone failed"; }
    grep -q "^mgtrain .*: 2 rank(s) on 1 node(s): n1 (ranks 0-1)$" resume.log || fail "the resumed run is not on n1 alone"
    grep -q "resumed from step $step" resume.log || fail "the resumed run did not start from $last"
    [ -f "$WORK/ckpt/step-$((step + 20)).h5" ] || fail "the resumed run wrote no checkpoint at step $((step + 20))"
    ;;
  launch)
    # mgtrain launch over n1 (2 ranks), n2 (1) and n3 (1) loses n3 by its link: the 3 ranks left
    # cannot split the deterministic run's batch, so n2 waits and the second attempt runs on n1.
    # n3's link comes back; then n1's ranks are killed: the third attempt runs on n2 and n3 (the
    # node that waited and the node lost before), and the run ends with the bits of a run never
    # interrupted. Each restart is logged and in the metrics file.
    nodes_up 3
    export OMPI_MCA_oob_tcp_keepalive_time=5 OMPI_MCA_oob_tcp_keepalive_intvl=2 OMPI_MCA_oob_tcp_keepalive_probes=3
    printf 'n1 slots=2\nn2 slots=1\nn3 slots=1\n' >hosts
    steps=1500
    write_config run.ini "[sync]" "deterministic = true" "[train]" "epochs = 40" "max_steps = $steps" \
      "log_every = 100" "[checkpoint]" "every_steps = 100" "[comm]" "timeout_s = 20"
    # shellcheck disable=SC2046  # the MCA options are separate words
    node_run n1 timeout --kill-after=10 500 "$MGTRAIN" launch --hostfile hosts --max-restarts 3 --probe-timeout 5 \
      --launcher "mpirun $(sim_mpirun_options)" -- train --config run.ini >out.log 2>&1 &
    job=$!
    # Waits until the run's checkpoints pass step $1 (a step of the attempt running now).
    checkpoint_past() {
      for _ in $(seq 600); do
        latest=$(cat "$WORK/ckpt/latest" 2>/dev/null || true)
        latest=${latest#step-}
        [ -n "$latest" ] && [ "${latest%.h5}" -gt "$1" ] && return 0
        kill -0 $job 2>/dev/null || { cat out.log; fail "the supervisor ended before step $1"; }
        sleep 0.2
      done
      cat out.log
      fail "no checkpoint past step $1"
    }
    checkpoint_past 100
    ip link set "$SIM_PREFIX-v3" down
    lost_at=$SECONDS
    for _ in $(seq 600); do grep -q "^resumed from step" out.log && break; sleep 0.2; done
    # A figure for the docs, not a check: the machine is shared.
    echo "training again on n1 $((SECONDS - lost_at)) s after n3's link went down"
    grep -q "^mgtrain launch: node n2 waits: train.global_batch = 128 does not divide among 3 ranks$" out.log ||
      { cat out.log; fail "n2 was not set aside for the 3 ranks left"; }
    grep -q "attempt 2 of at most 4: 2 rank(s) on n1, resuming from step-[0-9]*.h5 after losing n3" out.log ||
      { cat out.log; fail "no second attempt on n1 after losing n3"; }
    resumed=$(sed -n 's/.*attempt 2 of.*resuming from step-\([0-9]*\)\.h5.*/\1/p' out.log)
    checkpoint_past $((resumed + 100))
    # n3's link comes back, as a repaired switch port would; its rank of the first attempt ended
    # with its daemon when the link went down, so nothing of that attempt is left there.
    ip link set "$SIM_PREFIX-v3" up
    for _ in $(seq 30); do [ -z "$(ip netns pids "$(sim_ns n3)")" ] && break; sleep 1; done
    [ -z "$(ip netns pids "$(sim_ns n3)")" ] || fail "processes of the first attempt are left on n3"
    # n1's ranks, not the supervisor beside them.
    for p in $(ip netns pids "$(sim_ns n1)"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = mgtrain ] && ! tr '\0' ' ' <"/proc/$p/cmdline" | grep -q " launch " &&
        kill -KILL "$p"
    done
    set +e
    wait $job
    rc=$?
    set -e
    grep "^mgtrain launch:\|^done:" out.log
    [ $rc -eq 0 ] || { tail -n 40 out.log; fail "the supervised run ended with status $rc"; }
    grep -q "node n2 answers: it joins the next attempt" out.log || fail "n2, which waited, was not taken again"
    grep -q "node n3 answers: it joins the next attempt" out.log || fail "n3, its link back, was not taken again"
    grep -q "attempt 3 of at most 4: 2 rank(s) on n2, n3, resuming from step-[0-9]*.h5 after losing n1" out.log ||
      fail "no third attempt on n2 and n3 after losing n1"
    grep -q "attempt 3 finished the run on n2, n3$" out.log || fail "the third attempt did not finish the run"
    [ "$(grep -c '"event":"restart"' "$WORK/ckpt/metrics.jsonl")" -eq 2 ] ||
      fail "the metrics file does not hold the two restarts"
    run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/whole" --checkpoint.every_steps=0 >whole.log 2>&1 ||
      { cat whole.log; fail "the uninterrupted run"; }
    survived=$(group_hash "$WORK/ckpt/step-$steps.h5" /params)
    whole=$(group_hash "$WORK/whole/step-$steps.h5" /params)
    echo "/params after $steps steps: losing n3 then n1 $survived, uninterrupted $whole"
    [ "$survived" = "$whole" ] || fail "the run that lost two nodes differs from one never interrupted"
    ;;
  launch_default)
    # The default mode (each rank's reduction order its own) has no bits to compare: a run on
    # n1 x 2, n2 and n3 that loses n3 goes on at 2 ranks on n1, since the 3 left cannot split the
    # global batch of 128 (n2 waits), and must reach the accuracy of a run never interrupted, as
    # the default case's two placements do.
    nodes_up 3
    printf 'n1 slots=2\nn2 slots=1\nn3 slots=1\n' >hosts
    steps=1500
    write_config run.ini "[train]" "epochs = 40" "max_steps = $steps" "log_every = 100" \
      "[checkpoint]" "every_steps = 100" "[comm]" "timeout_s = 20"
    # shellcheck disable=SC2046  # the MCA options are separate words
    node_run n1 timeout --kill-after=10 400 "$MGTRAIN" launch --hostfile hosts --probe-timeout 5 \
      --launcher "mpirun $(sim_mpirun_options)" -- train --config run.ini >out.log 2>&1 &
    job=$!
    for _ in $(seq 600); do
      latest=$(cat "$WORK/ckpt/latest" 2>/dev/null || true)
      latest=${latest#step-}
      [ -n "$latest" ] && [ "${latest%.h5}" -ge 200 ] && break
      kill -0 $job 2>/dev/null || { cat out.log; fail "the supervisor ended before step 200"; }
      sleep 0.2
    done
    for p in $(ip netns pids "$(sim_ns n3)"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = mgtrain ] && kill -KILL "$p"
    done
    set +e
    wait $job
    rc=$?
    set -e
    grep "^mgtrain launch:\|^done:" out.log
    [ $rc -eq 0 ] || { tail -n 40 out.log; fail "the supervised run ended with status $rc"; }
    grep -q "^mgtrain launch: node n2 waits: train.global_batch = 128 does not divide among 3 ranks$" out.log ||
      fail "n2 was not set aside for the 3 ranks left"
    grep -q "attempt 2 of at most 4: 2 rank(s) on n1, resuming from step-[0-9]*.h5 after losing n3" out.log ||
      fail "no second attempt on n1 after losing n3"
    run_np 4 600 train --config run.ini --checkpoint.dir="$WORK/whole" --checkpoint.every_steps=0 >whole.log 2>&1 ||
      { cat whole.log; fail "the uninterrupted run"; }
    survived=$(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' out.log | tail -n 1)
    whole=$(sed -n 's/^test accuracy \([0-9.]*\),.*/\1/p' whole.log)
    echo "test accuracy after $steps steps: losing n3 $survived, uninterrupted $whole"
    [ -n "$survived" ] && [ -n "$whole" ] || fail "a run printed no test accuracy"
    awk -v a="$survived" -v b="$whole" 'BEGIN { d = a - b; exit !(d <= 0.01 && d >= -0.01) }' ||
      fail "the run that lost n3 reached test accuracy $survived, more than 0.01 from the uninterrupted $whole"
    ;;
  launch_mid_write)
    # Rank 0 (n1) is killed while it writes the checkpoint of step 300: the next attempt resumes
    # from step 200, whose checkpoint the cut write left intact, on n2 and on n3, which --max-nodes 2
    # kept out until then, and the run ends with the bits of one never interrupted.
    nodes_up 3
    printf 'n1 slots=1\nn2 slots=1\nn3 slots=1\n' >hosts
    steps=600
    write_config run.ini "[sync]" "deterministic = true" "[train]" "epochs = 40" "max_steps = $steps" \
      "log_every = 100" "[checkpoint]" "every_steps = 100" "keep = 0" "[comm]" "timeout_s = 20"
    set +e
    # shellcheck disable=SC2046  # the MCA options are separate words
    MGTRAIN_FAULT=0:300:checkpoint-after-data:kill MGTRAIN_FAULT_ONCE=$WORK/fault-fired \
      node_run n1 timeout --kill-after=10 300 "$MGTRAIN" launch --hostfile hosts --max-nodes 2 --probe-timeout 5 \
      --launcher "mpirun -x MGTRAIN_FAULT -x MGTRAIN_FAULT_ONCE $(sim_mpirun_options)" -- train --config run.ini \
      >out.log 2>&1
    rc=$?
    set -e
    grep "^mgtrain launch:\|^mgtrain: injected\|^done:" out.log
    [ $rc -eq 0 ] || { tail -n 40 out.log; fail "the supervised run ended with status $rc"; }
    [ -f "$WORK/fault-fired" ] || fail "the fault never fired"
    grep -q "attempt 1 of at most 4: 2 rank(s) on n1, n2$" out.log || fail "the first attempt was not on n1 and n2"
    grep -q "node n3 answers: it joins the next attempt" out.log || fail "n3 was not taken in"
    grep -q "attempt 2 of at most 4: 2 rank(s) on n2, n3, resuming from step-200.h5 after losing n1" out.log ||
      fail "the second attempt did not resume from step-200.h5 on n2 and n3"
    [ ! -f "$WORK/ckpt/step-300.h5" ] || [ "$(grep -c "^resumed from step 200" out.log)" -eq 1 ] ||
      fail "the cut write of step 300 was taken for a checkpoint"
    run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/whole" --checkpoint.every_steps=0 >whole.log 2>&1 ||
      { cat whole.log; fail "the uninterrupted run"; }
    [ "$(group_hash "$WORK/ckpt/step-$steps.h5" /params)" = "$(group_hash "$WORK/whole/step-$steps.h5" /params)" ] ||
      fail "the run whose checkpoint write was cut differs from one never interrupted"
    ;;
  slurm_launch)
    # mgtrain launch as a 2-node Slurm job's batch script (sbatch --no-kill): node n2's tasks are
    # killed mid-run, srun says so, and launch starts the job again inside the same allocation on
    # n1 alone; the deterministic run ends with the bits of a run never interrupted.
    nodes_up 2
    source "$(dirname "$0")/../slurm/cluster.sh"
    trap 'cluster_stop; nodes_down' EXIT
    cluster_start "$WORK/cluster" 2 "$WORK" "$DATA_DIR" "$(dirname "$MGTRAIN")/.." "$EXAMPLES" ||
      fail "could not bring up the test cluster on nodes n1, n2"
    export OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=$SIM_SUBNET \
      OMPI_MCA_oob_tcp_if_include=$SIM_SUBNET OMPI_MCA_mpi_yield_when_idle=1
    steps=1200
    write_config run.ini "[sync]" "deterministic = true" "[train]" "epochs = 40" "max_steps = $steps" \
      "log_every = 100" "[checkpoint]" "every_steps = 100" "[comm]" "timeout_s = 20"
    job=$(sbatch --parsable --no-kill --nodes=2 --ntasks-per-node=2 --chdir="$WORK" --output="$WORK/launch-%j.log" \
      --wrap "$MGTRAIN launch --max-restarts 2 --probe-timeout 10 -- train --config run.ini")
    log="$WORK/launch-$job.log"
    for _ in $(seq 600); do
      latest=$(cat "$WORK/ckpt/latest" 2>/dev/null || true)
      latest=${latest#step-}
      [ -n "$latest" ] && [ "${latest%.h5}" -ge 200 ] && break
      squeue -h -j "$job" 2>/dev/null | grep -q . || { cat "$log"; fail "the job ended before step 200"; }
      sleep 0.2
    done
    for p in $(ip netns pids "$(sim_ns n2)"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = mgtrain ] && kill -KILL "$p"
    done
    for _ in $(seq 900); do
      squeue -h -j "$job" 2>/dev/null | grep -q . || break
      sleep 0.5
    done
    grep "^mgtrain launch:\|^done:\|^srun: error" "$log" || true
    grep -q "^mgtrain launch: attempt 1 of at most 3: 4 rank(s) on n1, n2$" "$log" ||
      { cat "$log"; fail "the first attempt was not on n1 and n2"; }
    grep -q "^mgtrain launch: attempt 2 of at most 3: 2 rank(s) on n1, resuming from step-[0-9]*.h5 after losing n2" \
      "$log" || { cat "$log"; fail "no second attempt on n1 after losing n2"; }
    grep -q "^mgtrain launch: attempt 2 finished the run on n1$" "$log" || fail "the second attempt did not finish"
    run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/whole" --checkpoint.every_steps=0 >whole.log 2>&1 ||
      { cat whole.log; fail "the uninterrupted run"; }
    survived=$(group_hash "$WORK/ckpt/step-$steps.h5" /params)
    whole=$(group_hash "$WORK/whole/step-$steps.h5" /params)
    echo "/params after $steps steps: losing n2 under Slurm $survived, uninterrupted $whole"
    [ "$survived" = "$whole" ] || fail "the Slurm run that lost n2 differs from one never interrupted"
    ;;
  *) fail "unknown case $1" ;;
esac
