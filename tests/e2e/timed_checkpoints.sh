#!/usr/bin/env bash
# checkpoint.every_seconds: checkpoints by rank 0's clock, agreed at a step's end, so every rank
# writes after the same step. Rank 0 is slowed (MGTRAIN_TEST_SLOW_RANK) to 20 ms a step, so 150
# steps take 3 s or more and a checkpoint each second falls at steps every_steps never names.
source "$(dirname "$0")/lib.sh"

case $1 in
  np2)
    write_config run.ini "[sync]" "deterministic = true" "[train]" "max_steps = 150" \
      "[checkpoint]" "every_seconds = 1" "keep = 0"
    MGTRAIN_TEST_SLOW_RANK=0:20 run_np 2 300 train --config run.ini >timed.log 2>&1 ||
      { cat timed.log; fail "the run with checkpoint.every_seconds = 1 failed"; }
    mapfile -t steps < <(find ckpt -name 'step-*.h5' | sed 's/.*step-\([0-9]*\)\.h5/\1/' | sort -n)
    echo "checkpoints at steps: ${steps[*]}"
    [ "${#steps[@]}" -ge 3 ] || fail "expected 2 or more checkpoints by time before the final one, got ${#steps[@]} in all"
    [ "${steps[-1]}" -eq 150 ] || fail "no final checkpoint at step 150"
    # The run resumed from a checkpoint written by time ends with the uninterrupted run's bits.
    middle=${steps[0]}
    run_np 2 300 train --config run.ini --resume "$WORK/ckpt/step-$middle.h5" --checkpoint.dir="$WORK/resumed" \
      --checkpoint.every_seconds=0 >resumed.log 2>&1 || { cat resumed.log; fail "resuming from step $middle"; }
    [ "$(group_hash ckpt/step-150.h5 /params)" = "$(group_hash resumed/step-150.h5 /params)" ] ||
      fail "resumed from the timed checkpoint at step $middle, the run differs"
    ;;
  param_server)
    write_config run.ini "[sync]" "name = param_server" "[train]" "max_steps = 10" "[checkpoint]" "every_seconds = 5"
    set +e
    run_np 3 300 train --config run.ini >out.log 2>&1
    rc=$?
    set -e
    cat out.log
    [ $rc -ne 0 ] || fail "param_server with checkpoint.every_seconds was not refused"
    grep -q "mgtrain: error: \[rank 0\] checkpoint.every_seconds = 5: sync.name = param_server writes its servers' state counted in updates" out.log ||
      fail "the refusal's line"
    ;;
  *) fail "unknown case $1" ;;
esac
