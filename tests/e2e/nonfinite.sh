#!/usr/bin/env bash
# A NaN gradient on one rank (test-only MGTRAIN_TEST_NAN_AT): train.nonfinite = abort ends every
# rank with one line naming the step; skip skips that step on all ranks, counts it and trains on.
# Usage: nonfinite.sh abort|skip [host|device]  (where the step runs: in_memory in lib.sh)
source "$(dirname "$0")/lib.sh"
write_config run.ini
export MGTRAIN_TEST_NAN_AT=1:7
[ "${2:-host}" = device ] && export MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1
case $1 in
  abort)
    set +e
    run_np 2 120 train --config run.ini --train.max_steps=20 >out.log 2>err.log
    rc=$?
    set -e
    cat err.log
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "exit $rc: expected a clean failure"
    [ "$(grep -c '^mgtrain: error:' err.log)" -eq 1 ] || fail "expected exactly one error line"
    grep -q "non-finite gradient at step 7" err.log || fail "the error does not name step 7"
    [ ! -e ckpt/latest ] || fail "a checkpoint was written after the NaN"
    ;;
  skip)
    run_np 2 120 train --config run.ini --train.max_steps=20 --train.nonfinite=skip --json >out.log 2>&1 ||
      { cat out.log; fail "training failed"; }
    grep -q "non-finite gradient at step 7: step skipped" out.log || fail "no warning for step 7"
    [ "$(grep '^{' out.log | json_field skipped_steps)" = "1" ] || fail "skipped_steps is not 1"
    loss=$(grep '^{' out.log | json_field final_loss)
    awk -v l="$loss" 'BEGIN { exit !(l == l + 0 && l < 5) }' || fail "final loss $loss is not a finite number"
    ;;
  *) fail "unknown case $1" ;;
esac
