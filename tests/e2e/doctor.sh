#!/usr/bin/env bash
# `mgtrain doctor`: one row per rank and a verdict. Usage: doctor.sh CASE
#   cpu, singleton: this machine as it is (no GPU): exit 0, a row per rank with the MPI library's
#     version, and the CPU-fallback verdict; under mpirun -np 2, and as an Open MPI singleton.
#   shared_gpu, versions, busy, mixed: MGTRAIN_TEST_DOCTOR makes the ranks report GPUs, other
#     nodes and versions; each problem must be named with its reason, and the exit code is 1.
#   links: simulated GPUs without and with peer access: shown per GPU, a note where it is missing.
#   device_gpu: train.device = gpu with a rank that has no GPU is a problem, as train refuses it.
#   param_server: with the run's config, a parameter server's serving rank takes no GPU, so 2
#     workers and 1 server fit 2 GPUs (and without the config, 3 ranks do not); 2 workers on 1 GPU
#     are counted as training ranks, unless the config allows sharing (a note); a run on the CPU
#     minds no GPU; a bad config is one error line and a failed exit.
#   config_data: data the run refuses before step 1 (a data.train or data.test that does not exist,
#     samples the model cannot take, a global batch the ranks do not divide, an augmentation entry it
#     cannot parse): the doctor's error line and exit status are train's.
source "$(dirname "$0")/lib.sh"
host=$(hostname)
mpi_version=$(mpirun --version | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p' | head -1)
[ -n "$mpi_version" ] || fail "cannot read Open MPI's version from mpirun --version"

# doctor NP [ARGS]: runs it, keeps stdout in out.log and stderr in err.log, sets rc.
doctor() {
  set +e
  if [ "$1" = 1 ]; then
    OMPI_MCA_ess_singleton_isolated=1 timeout --kill-after=10 60 "$MGTRAIN" doctor "${@:2}" >out.log 2>err.log
  else
    run_np "$1" 60 doctor "${@:2}" >out.log 2>err.log
  fi
  rc=$?
  set -e
  cat out.log err.log
  ! grep -q '^mgtrain: error:' err.log || fail "doctor reported an error of its own"
}

expect() { grep -qF -- "$1" out.log || fail "expected in the report: $1"; }

# A table row: rank, host, local rank/ranks on the node.
expect_row() { grep -qE "^$1 +$2 +$3 " out.log || fail "no row for rank $1 on $2 (local $3)"; }

case $1 in
  cpu | singleton)
    [ ! -e /dev/nvidiactl ] || { echo "SKIP: this machine has a GPU; the case is the CPU fallback"; exit 77; }
    if [ "$1" = cpu ]; then np=2; else np=1; fi
    doctor $np
    [ $rc -eq 0 ] || fail "exit $rc, expected 0: no GPU is the CPU fallback, not a problem"
    [ "$(grep -cE '^[0-9]+ ' out.log)" -eq $np ] || fail "expected $np rows, one per rank"
    for ((r = 0; r < np; r++)); do
      expect_row $r "$host" "$r/$np"
      grep -E "^$r " out.log | grep -qF "Open MPI v$mpi_version" || fail "rank $r's row lacks Open MPI v$mpi_version"
    done
    expect "MPI library: Open MPI v$mpi_version"
    expect "verdict: OK, CPU fallback: no usable GPU on any node, so each rank trains on the CPU ("
    ;;
  shared_gpu)
    MGTRAIN_TEST_DOCTOR='*:gpus=1' doctor 2
    [ $rc -eq 1 ] || fail "exit $rc, expected 1"
    expect_row 0 "$host" 0/2
    expect_row 1 "$host" 1/2
    expect "verdict: 1 problem:"
    expect "$host: 2 ranks but 1 GPU, so ranks share a GPU: GPU 0 (00000000:00:00.0) by ranks 0, 1. Start at most 1 rank per node (mpirun --map-by ppr:1:node)"
    ;;
  versions)
    MGTRAIN_TEST_DOCTOR='*:gpus=2;1:host=node-b,mpi=Other MPI v9.9' doctor 2
    [ $rc -eq 1 ] || fail "exit $rc, expected 1"
    expect_row 1 node-b 1/2
    expect "verdict: 1 problem:"
    expect "MPI library differs between ranks: Open MPI v$mpi_version on $host (rank 0); Other MPI v9.9 on node-b (rank 1)"
    ;;
  busy)
    MGTRAIN_TEST_DOCTOR='*:gpus=2;0:used_gib=5' doctor 2
    [ $rc -eq 1 ] || fail "exit $rc, expected 1"
    expect "verdict: 1 problem:"
    expect "$host GPU 0 (test GPU, 00000000:00:00.0) is busy: 5.0 GiB of 80.0 GiB in use by other processes before this job started (threshold 1.0 GiB, --busy-gib)"
    # A higher threshold accepts it.
    set +e
    MGTRAIN_TEST_DOCTOR='*:gpus=2;0:used_gib=5' run_np 2 60 doctor --busy-gib 8 >out.log 2>err.log
    rc=$?
    set -e
    [ $rc -eq 0 ] || { cat out.log err.log; fail "exit $rc with --busy-gib 8, expected 0"; }
    expect "verdict: OK"
    ;;
  links)
    # Two GPUs that cannot reach each other: shown, and a note (not a problem); then two that can.
    MGTRAIN_TEST_DOCTOR='*:gpus=2,p2p=0,nvlinks=0' doctor 2
    [ $rc -eq 0 ] || fail "exit $rc, expected 0: missing peer access is a note"
    expect "GPU links on $host:"
    expect "  GPU 0: no peer access to 1; 0 NVLinks up"
    expect "note: $host: GPU pairs without peer-to-peer access: 0-1; NCCL moves their data through host memory"
    MGTRAIN_TEST_DOCTOR='*:gpus=2,p2p=1,nvlinks=18' doctor 2
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    expect "  GPU 1: peer access to 0; 18 NVLinks up"
    ! grep -q "without peer-to-peer" out.log || fail "a note about peer access where every pair has it"
    ;;
  mixed)
    MGTRAIN_TEST_DOCTOR='0:gpus=1;1:host=node-b' doctor 2
    [ $rc -eq 1 ] || fail "exit $rc, expected 1"
    expect "verdict: 1 problem:"
    expect "ranks without a usable GPU would train on the CPU beside ranks on GPUs: node-b (rank 1) ("
    ;;
  device_gpu)
    # train.device = gpu where a rank has no GPU: train refuses it, so the doctor may not say OK.
    write_config run.ini "[train]" "device = gpu"
    MGTRAIN_TEST_DOCTOR='0:gpus=1;1:host=node-b' doctor 2 --config run.ini
    [ $rc -eq 1 ] || fail "exit $rc, expected 1"
    expect "rank 1 on node-b: train.device = gpu, but it has no usable GPU ("
    ! grep -q "rank 0 on $host: train.device = gpu" out.log || fail "rank 0, which has a GPU, was named"
    # Without any GPU: every rank is named, and no "CPU fallback" is offered where train has none.
    MGTRAIN_TEST_DOCTOR='*:host=node-c' doctor 2 --config run.ini
    [ $rc -eq 1 ] || fail "exit $rc without GPUs, expected 1"
    expect "rank 0 on node-c: train.device = gpu, but it has no usable GPU ("
    expect "rank 1 on node-c: train.device = gpu, but it has no usable GPU ("
    ! grep -q "CPU fallback" out.log || fail "a CPU fallback was offered for train.device = gpu"
    ;;
  param_server)
    write_config run.ini "[sync]" "name = param_server" "servers = 1"
    MGTRAIN_TEST_DOCTOR='*:gpus=2' doctor 3 --config run.ini
    [ $rc -eq 0 ] || fail "exit $rc, expected 0: the serving rank needs no GPU"
    grep -qE "^2 +$host +2/3 +- \(serves\) " out.log || fail "rank 2's row does not say it serves"
    grep -qE "^1 +$host +1/3 +1: test GPU " out.log || fail "rank 1 does not train on GPU 1"
    expect "serving ranks (the sync strategy's servers; no GPU, they update on the CPU): $host (rank 2)"
    expect "verdict: OK"
    # The same ranks without the config: all three would train.
    MGTRAIN_TEST_DOCTOR='*:gpus=2' doctor 3
    [ $rc -eq 1 ] || fail "exit $rc without --config, expected 1"
    expect "$host: 3 ranks but 2 GPUs, so ranks share a GPU"
    MGTRAIN_TEST_DOCTOR='*:gpus=1' doctor 3 --config run.ini
    [ $rc -eq 1 ] || fail "exit $rc with 2 workers on 1 GPU, expected 1"
    expect "$host: 2 training ranks (and 1 serving, without a GPU) but 1 GPU, so ranks share a GPU: GPU 0 (00000000:00:00.0) by ranks 0, 1. Start at most 1 training rank per node"
    # The run allows sharing (gpu.allow_shared): a note, not a problem; on the CPU, no GPU matters.
    MGTRAIN_TEST_DOCTOR='*:gpus=1;0:used_gib=5' doctor 3 --config run.ini --gpu.allow_shared=true
    [ $rc -eq 1 ] || fail "exit $rc with a busy GPU, expected 1"
    expect "verdict: 1 problem:"
    expect "is busy: 5.0 GiB"
    expect "note: $host: ranks share a GPU, as gpu.allow_shared = true allows: GPU 0 (00000000:00:00.0) by ranks 0, 1;"
    MGTRAIN_TEST_DOCTOR='*:gpus=1;0:used_gib=5' doctor 3 --config run.ini --train.device=cpu
    [ $rc -eq 0 ] || fail "exit $rc with train.device = cpu, expected 0: the run uses no GPU"
    expect "note: the config trains on the CPU (train.device = cpu): the run uses none of the GPUs"
    # A config the run would refuse is refused here too, by one rank, naming the key.
    set +e
    run_np 2 60 doctor --config run.ini --sync.servers=2 >out.log 2>err.log
    rc=$?
    set -e
    [ $rc -ne 0 ] || fail "exit 0 with sync.servers = 2 at np=2"
    one_error_line err.log | grep -qF "'sync.servers' = 2: expected fewer than the 2 ranks" ||
      fail "the error does not name sync.servers"
    ;;
  config_data)
    # Data the run refuses before step 1 is refused by the doctor with the run's line and exit
    # status: it said OK for a data.train that does not exist.
    write_config run.ini
    for override in --data.train="$WORK/missing.h5" --data.test="$WORK/missing.h5" --train.global_batch=127 \
      --model.inputs=100 --data.augment=crop:x; do
      for command in train doctor; do
        set +e
        run_np 2 60 $command --config run.ini --train.max_steps=1 "$override" >"$command.out" 2>"$command.err"
        rc=$?
        set -e
        [ $rc -eq 2 ] || { cat "$command.out" "$command.err"; fail "$command $override: exit $rc, expected 2"; }
        one_error_line "$command.err" >/dev/null
      done
      [ "$(grep '^mgtrain: error:' doctor.err)" = "$(grep '^mgtrain: error:' train.err)" ] ||
        fail "$override: the doctor says $(cat doctor.err), train says $(cat train.err)"
      ! grep -q "^verdict:" doctor.out || fail "$override: the doctor gave a verdict on a run that cannot start"
    done
    # Data the run takes: the verdict as before.
    doctor 2 --config run.ini
    [ $rc -eq 0 ] || fail "exit $rc for a config whose run starts"
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
