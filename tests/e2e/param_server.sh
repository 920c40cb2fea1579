#!/usr/bin/env bash
# The asynchronous parameter server (np=3: two workers, one server).
# Usage: param_server.sh accuracy|stop_resume|kill_resume|slow_worker|lockstep|lost_worker|killed_worker
#                        |killed_server|stopped_server|continue_stopped|continue_rank0
source "$(dirname "$0")/lib.sh"
write_config run.ini
ps=(--sync.name=param_server --checkpoint.every_steps=0)

# The value of a one-dimensional integer dataset of a checkpoint, as "a,b,c".
h5_ints() {  # h5_ints FILE DATASET
  h5dump -d "$2" -y -w 0 "$1" | awk '/DATA \{/ { on = 1; next } on && /\}/ { exit } on' | tr -d ' \n'
}

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
  accuracy)  # the MLP example as shipped (a checkpoint every 1000 steps) reaches 0.85 in 3 epochs
    run_np 3 900 train --config "$EXAMPLES/fashion_mnist_mlp.ini" --data.train="$DATA_DIR/train.h5" --data.test="$DATA_DIR/test.h5" \
      --checkpoint.dir="$WORK/ckpt" --sync.name=param_server --train.epochs=3 --json >train.log 2>&1 \
      || { cat train.log; fail "training failed"; }
    checkpoint=$(grep '^{' train.log | tail -n 1 | json_field checkpoint)
    accuracy=$("$MGTRAIN" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" --json | json_field accuracy)
    echo "param_server test accuracy $accuracy"
    awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.85) }' || fail "accuracy $accuracy below 0.85"
    grep -q '"staleness_mean"' ckpt/metrics.rank2.jsonl || fail "the server recorded no staleness figures"
    # The periodic checkpoint: the servers' state after 1000 x 2 updates, each worker's steps
    # adding up to them, and a model `mgtrain eval` reads.
    [ -f ckpt/step-1000.h5 ] || { ls ckpt; fail "no checkpoint at step 1000"; }
    [ "$(h5_ints ckpt/step-1000.h5 /sync/updates)" = 2000 ] || fail "step-1000.h5: /sync/updates $(h5_ints ckpt/step-1000.h5 /sync/updates)"
    steps=$(h5_ints ckpt/step-1000.h5 /sync/worker_steps)
    [ $(( ${steps//,/+} )) -eq 2000 ] || fail "step-1000.h5: worker steps $steps do not add up to 2000 updates"
    mid=$("$MGTRAIN" eval --checkpoint ckpt/step-1000.h5 --data "$DATA_DIR/test.h5" --json | json_field accuracy)
    echo "step-1000.h5 (workers at steps $steps): test accuracy $mid"
    awk -v a="$mid" 'BEGIN { exit !(a >= 0.8) }' || fail "the periodic checkpoint holds no trained model ($mid)"
    ;;
  stop_resume)
    # Every rank is sent SIGTERM, as scancel does: the workers stop, the servers hand rank 0 their
    # state, and the final checkpoint keeps each worker's own step. Resumed with as many workers,
    # each goes on from there, and the servers' update count (their metrics) goes on too.
    export MGTRAIN_TEST_SLOW_RANK=0:20
    args=(train --config run.ini --train.max_steps=400 --train.log_every=20 --checkpoint.dir="$WORK/ckpt"
          --sync.name=param_server --checkpoint.every_steps=100)
    run_np 3 300 "${args[@]}" >out.log 2>&1 &
    job=$!
    for _ in $(seq 150); do [ -f ckpt/step-100.h5 ] && break; sleep 0.2; done
    for rank in 0 1 2; do signal_rank $rank TERM; done
    rc=0
    wait $job || rc=$?
    # 128 + SIGTERM: the run is not done, as the scheduler is told.
    [ $rc -eq 143 ] || { cat out.log; fail "the stopped job ended with $rc, expected 143"; }
    grep -q "stopped by signal 15 at step [0-9]* of rank 0: writing the servers' state" out.log \
      || { cat out.log; fail "the job did not stop cleanly"; }
    stopped=$(cat ckpt/latest)
    updates=$(h5_ints "ckpt/$stopped" /sync/updates) steps=$(h5_ints "ckpt/$stopped" /sync/worker_steps)
    echo "stopped: $stopped, $updates updates, workers at steps $steps"
    [ $(( ${steps//,/+} )) -eq "$updates" ] || fail "worker steps $steps do not add up to $updates updates"
    [ "$updates" -lt 800 ] || fail "the run was not stopped midway ($updates updates)"
    last_before=$(tail -n 1 ckpt/metrics.rank2.jsonl | sed -n 's/.*"updates":\([0-9]*\).*/\1/p')
    unset MGTRAIN_TEST_SLOW_RANK
    run_np 3 300 "${args[@]}" --resume latest --json >resume.log 2>&1 || { cat resume.log; fail "resume failed"; }
    grep -q "^resumed from step $(( updates / 2 ))" resume.log || { cat resume.log; fail "not resumed from step $(( updates / 2 ))"; }
    # Each worker's first push after the resume is its own next step: none is applied twice.
    first_after=$(sed -n 's/.*"updates":\([0-9]*\).*/\1/p' ckpt/metrics.rank2.jsonl | awk -v b="$last_before" '$1 > b' | head -n 1)
    echo "server metrics: last record before the stop at $last_before updates, first after at $first_after"
    [ -n "$first_after" ] && [ "$first_after" -gt "$updates" ] || fail "the update count did not go on from $updates"
    [ -f ckpt/step-400.h5 ] || { ls ckpt; fail "the resumed run did not finish"; }
    final=$(h5_ints ckpt/step-400.h5 /sync/updates)
    [ "$final" -ge 800 ] || fail "the finished run counts $final updates, expected 800"
    ;;
  kill_resume)
    # A worker killed (SIGKILL): mpirun ends the job. The last periodic checkpoint resumes with
    # three workers and two servers instead of two and one.
    args=(train --config run.ini --train.max_steps=400 --train.global_batch=96 --checkpoint.dir="$WORK/ckpt"
          --sync.name=param_server --checkpoint.every_steps=50)
    MGTRAIN_TEST_SLOW_RANK=0:20 run_np 3 120 "${args[@]}" >out.log 2>&1 &
    job=$!
    for _ in $(seq 150); do [ -f ckpt/step-100.h5 ] && break; sleep 0.2; done
    signal_rank 1 KILL
    wait $job && fail "the job went on without a worker"
    latest=$(cat ckpt/latest)
    echo "killed; latest checkpoint $latest"
    run_np 5 300 "${args[@]}" --sync.servers=2 --resume latest --json >resume.log 2>&1 || { cat resume.log; fail "resume failed"; }
    latest_step=${latest#step-}
    grep -q "^resumed from step ${latest_step%.h5} " resume.log || { cat resume.log; fail "not resumed from $latest"; }
    # Three workers from the checkpoint's step on: 3 x that many updates, then every step after it.
    steps=$(h5_ints ckpt/step-400.h5 /sync/worker_steps)
    [ "$(h5_ints ckpt/step-400.h5 /sync/updates)" -ge 1200 ] || fail "step-400.h5 counts $(h5_ints ckpt/step-400.h5 /sync/updates) updates"
    [ "$(echo "$steps" | tr ',' '\n' | wc -l)" -eq 3 ] || fail "step-400.h5: worker steps $steps, expected three workers"
    accuracy=$("$MGTRAIN" eval --checkpoint ckpt/step-400.h5 --data "$DATA_DIR/test.h5" --json | json_field accuracy)
    echo "resumed run: workers at steps $steps, test accuracy $accuracy"
    awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.75) }' || fail "the resumed run holds no trained model ($accuracy)"
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
