#!/usr/bin/env bash
# One rank of four started differently (mpirun's MPMD syntax): the job must stop before step 1
# with exit 2 and one line naming both ranks and the first differing entry.
# Usage: mismatch.sh config|plugin_version|model_shapes
source "$(dirname "$0")/lib.sh"
case=$1
write_config run.ini
common=(train --config run.ini --train.max_steps=5)
case $case in
  config)
    odd=(--optimizer.lr=0.05)
    expect="ranks 0 and 3 differ in the resolved config and seed: rank 0 has 'optimizer.lr = 0.02', rank 3 has 'optimizer.lr = 0.05'" ;;
  plugin_version)
    odd=(--plugin-path "$TEST_PLUGIN_DIR/sgd-other-version")
    expect="ranks 0 and 3 differ in the plugin names and versions: rank 0 has 'optimizer:sgd@1.0.0', rank 3 has 'optimizer:sgd@1.0.1-test'" ;;
  model_shapes)
    odd=(--plugin-path "$TEST_PLUGIN_DIR/mlp-other-shapes")
    expect="ranks 0 and 3 differ in the model's parameter names and shapes: rank 0 has 'fc1.weight \[256, 784\]', rank 3 has 'fc1.weight \[100, 784\]'" ;;
  *) fail "unknown case $case" ;;
esac
rc=0
timeout --kill-after=10 120 mpirun --oversubscribe -np 3 "$MGTRAIN" "${common[@]}" : \
  -np 1 "$MGTRAIN" "${common[@]}" "${odd[@]}" >run.log 2>&1 || rc=$?
cat run.log | grep -v "^ \|^\[\|^#\|^$"
[ $rc = 2 ] || fail "exit $rc, expected 2 (stopped before step 1)"
one_error_line run.log >/dev/null
grep -q "mgtrain: error: \[rank 0\] $expect" run.log || fail "expected: $expect"
! grep -q "^training " run.log || fail "training started"
echo PASS
