#!/usr/bin/env bash
# A NaN gradient on one rank (test-only MGTRAIN_TEST_NAN_AT): train.nonfinite = abort ends every
# rank with one line naming the step; skip skips that step on all ranks, counts it and trains on.
# The line and a metrics record also name where it came from: rank 1, the first layer whose output
# held the NaN, the first parameter in backward order whose gradient did; in place (the CPU) right
# after the step, in device memory (a GPU's path) when the step's figures come back.
# Usage: nonfinite.sh abort|skip [host|device]  (where the step runs: in_memory in lib.sh)
source "$(dirname "$0")/lib.sh"
write_config run.ini
export MGTRAIN_TEST_NAN_AT=1:7
memory=${2:-host}
[ "$memory" = device ] && export MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1
# The MLP's NaN enters through its first sample: fc1's output holds it, the ReLU after it gives 0
# for it, so of the gradients only fc1.weight's (dy^T x, x the sample) does.
origin="rank 1's gradient, first the output of layer 'fc1', first parameter in backward order 'fc1.weight'"
# The origin in the message and in the metrics record of step 7.
check_origin() {  # check_origin LOG ACTION
  grep -qF "$origin" "$1" || { cat "$1"; fail "the message does not name the origin: $origin"; }
  local record
  record=$(grep '"nonfinite"' ckpt/metrics.jsonl) || fail "no non-finite record in the metrics file"
  echo "$record"
  for want in '"step":7' "\"action\":\"$2\"" '"nonfinite":1' '"layer":"fc1"' '"parameter":"fc1.weight"'; do
    grep -qF "$want" <<<"$record" || fail "the metrics record lacks $want"
  done
  # mgtrain report leaves the records out; an aborted run ended before it had figures to draw.
  if [ "$2" = skip ]; then
    "$MGTRAIN" report ckpt --out report.svg >report.log 2>&1 || { cat report.log; fail "mgtrain report on it"; }
  else
    "$MGTRAIN" report ckpt --out report.svg >report.log 2>&1 && fail "mgtrain report drew nothing"
    one_error_line report.log | grep -q "holds no figures to draw, only 1 non-finite step record" ||
      fail "mgtrain report's refusal"
  fi
}
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
    check_origin err.log abort
    [ ! -e ckpt/latest ] || fail "a checkpoint was written after the NaN"
    ;;
  skip)
    run_np 2 120 train --config run.ini --train.max_steps=20 --train.nonfinite=skip --json >out.log 2>&1 ||
      { cat out.log; fail "training failed"; }
    grep -q "non-finite gradient at step 7 (.*): step skipped" out.log || fail "no warning for step 7"
    check_origin out.log skip
    [ "$(grep '^{' out.log | json_field skipped_steps)" = "1" ] || fail "skipped_steps is not 1"
    loss=$(grep '^{' out.log | json_field final_loss)
    awk -v l="$loss" 'BEGIN { exit !(l == l + 0 && l < 5) }' || fail "final loss $loss is not a finite number"
    ;;
  *) fail "unknown case $1" ;;
esac
