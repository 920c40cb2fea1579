#!/usr/bin/env bash
# Trains a shipped example config on Fashion-MNIST under mpirun and checks the test accuracy of the
# final checkpoint. Usage: accuracy.sh MODEL NP EPOCHS MIN_ACCURACY
source "$(dirname "$0")/lib.sh"
model=$1 np=$2 epochs=$3 min=$4
run_np "$np" 1500 train --config "$EXAMPLES/fashion_mnist_$model.ini" --data.train="$DATA_DIR/train.h5" \
  --data.test="$DATA_DIR/test.h5" --checkpoint.dir="$WORK/ckpt" --train.epochs="$epochs" --json \
  >train.log 2>&1 || { cat train.log; fail "training failed"; }
summary=$(grep '^{' train.log | tail -n 1)
checkpoint=$(json_field checkpoint <<<"$summary")
accuracy=$("$MGTRAIN" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" --json | json_field accuracy)
echo "$model np=$np epochs=$epochs: test accuracy $accuracy; $summary"
awk -v a="$accuracy" -v m="$min" 'BEGIN { exit !(a >= m) }' || fail "accuracy $accuracy below $min"
