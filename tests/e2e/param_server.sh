#!/usr/bin/env bash
# The asynchronous parameter server (np=3: two workers, one server).
# Usage: param_server.sh accuracy|slow_worker|lockstep|lost_worker|killed_worker|killed_server|stopped_server
#                        |continue_stopped|continue_rank0
source "$(dirname "$0")/lib.sh"
write_config run.ini
ps=(--sync.name=param_server --checkpoint.every_steps=0)

# Once the job writing out.log has logged a training step, sends SIGNAL to its rank RANK (found by
# the job's checkpoint directory and Open MPI's rank variable).
signal_rank() {  # signal_rank RANK SIGNAL
  local p pid=""
  for _ in $(seq 100); do grep -q "^epoch 1/[0-9]* step [1-9]" out.log && break; sleep 0.2; done
  for p in $(pgrep -f -- "--checkpoint.dir=$WORK/ckpt"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && pid=$p
  done
  [ -n "$pid" ] || { cat out.log >&2; fail "no running rank $1 to signal"; }
  kill -"$2" "$pid"
}

case $1 in
  accuracy)  # the MLP example reaches 0.87 in the epochs all-reduce uses (10)
    run_np 3 900 train --config "$EXAMPLES/fashion_mnist_mlp.ini" --data.train="$DATA_DIR/train.h5" --data.test="$DATA_DIR/test.h5" \
      --checkpoint.dir="$WORK/ckpt" "${ps[@]}" --json >train.log 2>&1 || { cat train.log; fail "training failed"; }
    checkpoint=$(grep '^{' train.log | tail -n 1 | json_field checkpoint)
    accuracy=$("$MGTRAIN" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" --json | json_field accuracy)
    echo "param_server test accuracy $accuracy"
    awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.87) }' || fail "accuracy $accuracy below 0.87"
    grep -q '"staleness_mean"' ckpt/metrics.rank2.jsonl || fail "the server recorded no staleness figures"
    ;;
  slow_worker)  # rank 1 sleeps 20 ms a step: all-reduce waits for it, the asynchronous server does not
    export MGTRAIN_TEST_SLOW_RANK=1:20
    run_np 2 300 train --config run.ini --train.max_steps=100 --checkpoint.dir="$WORK/ar" --json >ar.log 2>&1 || { cat ar.log; fail "allreduce"; }
    run_np 3 300 train --config run.ini --train.max_steps=100 --checkpoint.dir="$WORK/ps" "${ps[@]}" \
      --sync.staleness=1000 --json >ps.log 2>&1 || { cat ps.log; fail "param_server"; }
    ar=$(grep '^{' ar.log | json_field samples_per_s) ps_rate=$(grep '^{' ps.log | json_field samples_per_s)
    echo "one slow rank: allreduce $ar samples/s, param_server $ps_rate samples/s"
    awk -v a="$ar" -v p="$ps_rate" 'BEGIN { exit !(p > a) }' || fail "the parameter server was not faster"
    ;;
  lockstep)  # staleness 0: no worker is ever more than the other's one update behind
    run_np 3 300 train --config run.ini --train.max_steps=200 --train.log_every=20 --checkpoint.dir="$WORK/ckpt" \
      "${ps[@]}" --sync.staleness=0 >train.log 2>&1 || { cat train.log; fail "training failed"; }
    cat ckpt/metrics.rank2.jsonl
    max=$(sed -n 's/.*"staleness_max":\([0-9]*\).*/\1/p' ckpt/metrics.rank2.jsonl | sort -n | tail -n 1)
    [ -n "$max" ] && [ "$max" -le 1 ] || fail "staleness reached ${max:-nothing} with sync.staleness = 0"
    ;;
  lost_worker)  # rank 1 stops sending (stuck, not dead): the server names it within the deadline
    export MGTRAIN_TEST_SLOW_RANK=1:60000
    start=$(date +%s)
    set +e
    run_np 3 120 train --config run.ini --train.max_steps=100 --checkpoint.dir="$WORK/ckpt" "${ps[@]}" \
      --comm.timeout_s=3 >out.log 2>err.log
    rc=$?
    set -e
    elapsed=$(( $(date +%s) - start ))
    echo "exit $rc after ${elapsed}s"; grep 'mgtrain: error' err.log || true
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "exit $rc: expected a clean failure"
    [ $elapsed -le 33 ] || fail "took ${elapsed}s with comm.timeout_s = 3"
    grep -q "mgtrain: error: \[rank 2\] parameter server rank 2: worker rank 1 sent nothing" err.log || fail "message"
    ;;
  killed_worker | killed_server | stopped_server)
    # A rank of a running job is killed (SIGKILL) or stopped (SIGSTOP: alive but silent) from
    # outside. Killed: mpirun names it and ends the job. Stopped: its peers' deadline names it.
    victim=1 signal=KILL
    [ "$1" = killed_worker ] || victim=2
    [ "$1" = stopped_server ] && signal=STOP
    run_np 3 120 train --config run.ini --train.epochs=20 --train.log_every=10 --checkpoint.dir="$WORK/ckpt" "${ps[@]}" \
      --comm.timeout_s=3 >out.log 2>&1 &
    job=$!
    signal_rank "$victim" "$signal"
    start=$(date +%s)
    rc=0
    wait $job || rc=$?
    elapsed=$(( $(date +%s) - start ))
    echo "SIG$signal to rank $victim: exit $rc after ${elapsed}s"; grep 'mgtrain: error\|exited on signal' out.log || true
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "exit $rc: expected a clean failure"
    [ $elapsed -le 33 ] || fail "took ${elapsed}s with comm.timeout_s = 3"
    if [ $signal = KILL ]; then
      grep -q "process rank $victim with PID .* exited on signal 9" out.log || fail "the killed rank is not named"
    else
      grep -q "mgtrain: error: \[rank [01]\] .*waiting for rank 2" out.log || fail "the stopped server is not named"
    fi
    no_ranks_left
    ;;
  continue_stopped | continue_rank0)
    # sync.on_lost_worker = continue at np=4 (three workers, one server). A worker is stopped from
    # outside (SIGSTOP: alive but silent); the others finish the run, rank 0 writes the final
    # checkpoint and ends the job with status 0. Losing rank 0, which writes it, ends the job.
    victim=1
    [ "$1" = continue_rank0 ] && victim=0
    run_np 4 240 train --config run.ini --train.epochs=2 --train.global_batch=96 --train.log_every=10 \
      --checkpoint.dir="$WORK/ckpt" "${ps[@]}" --sync.on_lost_worker=continue --comm.timeout_s=3 --json >out.log 2>&1 &
    job=$!
    signal_rank "$victim" STOP
    rc=0
    wait $job || rc=$?
    echo "SIGSTOP to rank $victim: exit $rc"; grep 'mgtrain: \|^warning' out.log || true
    if [ "$1" = continue_rank0 ]; then
      [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat out.log; fail "exit $rc: expected a clean failure"; }
      grep -q "worker rank 0 sent nothing .*rank 0 writes the final checkpoint" out.log || { cat out.log; fail "message"; }
      no_ranks_left
      exit 0
    fi
    [ $rc -eq 0 ] || { cat out.log; fail "exit $rc: expected the others to finish the run"; }
    grep -q "mgtrain: warning: \[rank 3\] parameter server rank 3: worker rank 1 sent nothing for 3 s .*going on with the other 2 worker(s) (sync.on_lost_worker = continue)" out.log \
      || { cat out.log; fail "the server did not name the lost worker"; }
    grep -q "^warning: the run went on without rank(s) 1 " out.log || { cat out.log; fail "rank 0 did not say the run went on without rank 1"; }
    grep -q "^mgtrain: the run is complete without rank(s) 1; ending the job" out.log || { cat out.log; fail "no closing line"; }
    result=$(grep '^{' out.log | tail -n 1)
    echo "$result" | grep -q '"lost_ranks":\[1\]' || fail "result: $result"
    # The servers applied the whole run: 2 epochs x 625 steps x 3 workers' shares (a push already
    # on its way when the count is reached is applied too).
    updates=$(tail -n 1 ckpt/metrics.rank3.jsonl | sed -n 's/.*"updates":\([0-9]*\).*/\1/p')
    [ "${updates:-0}" -ge $((2 * 625 * 3)) ] || fail "the server applied ${updates:-no} updates, expected $((2 * 625 * 3))"
    checkpoint=$(echo "$result" | json_field checkpoint)
    accuracy=$("$MGTRAIN" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" --json | json_field accuracy)
    echo "final checkpoint $checkpoint: test accuracy $accuracy"
    awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.8) }' || fail "the final checkpoint does not hold a trained model ($accuracy)"
    no_ranks_left
    ;;
  *) fail "unknown case $1" ;;
esac
