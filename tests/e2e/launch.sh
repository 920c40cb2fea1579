#!/usr/bin/env bash
# `mgtrain launch` on this machine alone (the restarts on the nodes left are tests/multinode's
# launch case): a run it finishes in one attempt; a job that fails for another reason than a lost
# node, not restarted; and its own bad input, each one line before any attempt.
source "$(dirname "$0")/lib.sh"
write_config run.ini "[checkpoint]" "every_steps = 10"
printf 'localhost slots=2\n' >hosts
launch() { timeout --kill-after=10 300 "$MGTRAIN" launch "$@"; }

case $1 in
  finishes)
    launch --hostfile hosts --launcher "mpirun --oversubscribe" -- train --config run.ini --train.max_steps=20 \
      >out.log 2>&1 || { cat out.log; fail "the supervised run failed"; }
    grep "^mgtrain launch:" out.log
    [ "$(grep -c "^mgtrain launch: attempt [0-9]* of" out.log)" -eq 1 ] || fail "expected one attempt"
    grep -q "^mgtrain launch: attempt 1 of at most 4: 2 rank(s) on localhost$" out.log || fail "the attempt's line"
    grep -q "^mgtrain launch: attempt 1 finished the run on localhost$" out.log || fail "the end's line"
    [ -f ckpt/step-20.h5 ] || fail "no final checkpoint"
    ;;
  not_restarted)
    # The data file is gone when the job starts: the job's own error, then the supervisor's line
    # that no node was lost; one attempt, the job's exit status.
    cp "$DATA_DIR/train.h5" gone.h5
    write_config run.ini "[data]" "train = $WORK/gone.h5"
    rm gone.h5
    set +e
    launch --hostfile hosts --launcher "mpirun --oversubscribe" -- train --config run.ini >out.log 2>&1
    rc=$?
    set -e
    cat out.log
    [ $rc -eq 2 ] || fail "expected the job's status 2, got $rc"
    [ "$(grep -c "^mgtrain launch: attempt [0-9]* of" out.log)" -eq 1 ] || fail "expected one attempt"
    grep -q "gone.h5" out.log || fail "the job's error does not name the missing file"
    grep -q "^mgtrain launch: the job failed with status 2 after [0-9]* s, and every node answers: not a lost node" \
      out.log || fail "the supervisor does not say why it does not restart"
    ;;
  stopped)
    # SIGTERM to launch goes to mpirun: the job stops with its final checkpoint, and nothing is
    # restarted.
    # Not under timeout: the signal must reach launch itself (the wait below is the hang guard).
    "$MGTRAIN" launch --hostfile hosts --launcher "mpirun --oversubscribe" -- train --config run.ini \
      --train.epochs=50 >out.log 2>&1 &
    job=$!
    for _ in $(seq 600); do
      [ -f ckpt/latest ] && break
      sleep 0.1
    done
    [ -f ckpt/latest ] || { cat out.log; fail "the run wrote no checkpoint"; }
    kill -TERM $job
    for _ in $(seq 1200); do
      kill -0 $job 2>/dev/null || break
      sleep 0.1
    done
    kill -0 $job 2>/dev/null && { kill -KILL $job; fail "launch did not end within 120 s of SIGTERM"; }
    set +e
    wait $job
    rc=$?
    set -e
    grep "^mgtrain launch:\|stopped by signal" out.log
    [ $rc -ne 0 ] || fail "the stopped run exited 0"
    grep -q "^mgtrain launch: stopped by signal 15: not restarted$" out.log || fail "the supervisor's line"
    [ "$(grep -c "^mgtrain launch: attempt [0-9]* of" out.log)" -eq 1 ] || fail "expected one attempt"
    stopped_at=$(sed -n 's/.*stopped by signal 15 at step \([0-9]*\).*/\1/p' out.log)
    [ -n "$stopped_at" ] && [ "$(cat ckpt/latest)" = "step-$stopped_at.h5" ] ||
      fail "no final checkpoint of the stopped step"
    ;;
  refused)
    : >empty
    printf 'localhost slots=2\nother slots=2\n' >hosts2
    check() {  # check EXPECTED_LINE ARGS...
      local expected=$1 out rc
      shift
      set +e
      out=$(launch "$@" 2>&1)
      rc=$?
      set -e
      echo "$out"
      [ $rc -eq 2 ] || fail "expected exit 2 for '$*', got $rc"
      [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "expected one line for '$*'"
      # shellcheck disable=SC2053  # the expected line may hold * patterns
      [[ $out == $expected ]] || fail "expected '$expected'"
    }
    check "mgtrain: error: launch: --hostfile 'missing': no such file (expected Open MPI's hostfile: a node a line, 'name slots=N')" \
      --hostfile missing -- train --config run.ini
    check "mgtrain: error: launch: --hostfile 'empty' names no node (expected a node a line)" \
      --hostfile empty -- train --config run.ini
    check "mgtrain: error: launch: --min-nodes 3: expected 1 to the hostfile's 2 node(s)" \
      --hostfile hosts2 --min-nodes 3 -- train --config run.ini
    check "mgtrain: error: launch: --max-restarts -1: expected 0 or more" \
      --hostfile hosts2 --max-restarts -1 -- train --config run.ini
    check "mgtrain: error: launch: expected '-- train --config FILE ...' after its own options, found 'bench'" \
      --hostfile hosts2 -- bench --config run.ini
    check "mgtrain: error: launch: unknown config key 'train.epochz'*" \
      --hostfile hosts2 -- train --config run.ini --train.epochz=2
    check "mgtrain: error: launch: --launcher 'no-such-mpirun': no such program in PATH (expected mpirun or srun)" \
      --hostfile hosts2 --launcher "no-such-mpirun -x A" -- train --config run.ini
    check "mgtrain: error: launch: sync.name = param_server cannot go on with fewer nodes*expected --min-nodes 2*got --min-nodes 1" \
      --hostfile hosts2 -- train --config run.ini --sync.name=param_server
    ;;
  *) fail "unknown case $1" ;;
esac
