#!/usr/bin/env bash
# The training conveniences: gradient clipping by global norm (optimizer.clip_norm), label
# smoothing (train.label_smoothing), the learning rate scaled with the global batch
# (optimizer.lr_scaling) and the test set evaluated after epochs (train.eval_every_epochs).
# Usage: train_options.sh epochs|device_memory|deterministic|refused
source "$(dirname "$0")/lib.sh"
raw=/usr/share/datasets/fashion-mnist

# COUNT bytes of a gzip file's content after its first SKIP; the stream cut short is no failure.
first_bytes() {  # first_bytes FILE.gz SKIP COUNT
  (set +o pipefail; gzip -dc "$1" | tail -c +$(($2 + 1)) | head -c "$3")
}

# The first N samples of the real training set, converted: epochs of a few steps.
small_train() {  # small_train N
  local n=$1 count
  count=$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((n >> 24 & 255)) $((n >> 16 & 255)) $((n >> 8 & 255)) $((n & 255)))
  { printf '\x00\x00\x08\x03'; printf "$count"; printf '\x00\x00\x00\x1c\x00\x00\x00\x1c'
    first_bytes $raw/train-images-idx3-ubyte.gz 16 $((n * 784)); } >images.idx
  { printf '\x00\x00\x08\x01'; printf "$count"
    first_bytes $raw/train-labels-idx1-ubyte.gz 8 "$n"; } >labels.idx
  "$MGTRAIN" data convert --images images.idx --labels labels.idx --out small.h5 >/dev/null
}

# Each logged loss of two runs' metrics files; fails beyond a relative 1e-5.
same_losses() {  # same_losses A.jsonl B.jsonl
  paste -d' ' <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1") <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$2") |
    awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad++ }
         END { if (n == 0 || bad > 0) { print "  " bad " of " n " losses differ"; exit 1 } }'
}

options=(--optimizer.clip_norm=0.5 --train.label_smoothing=0.1)

case $1 in
  epochs)
    # 1024 samples in global batches of 128: 8 steps an epoch, 2 epochs, each evaluated by both ranks.
    small_train 1024
    write_config run.ini "[data]" "train = $WORK/small.h5" "[train]" "epochs = 2" "log_every = 4"
    run_np 2 300 train --config run.ini "${options[@]}" --train.eval_every_epochs=1 \
      --optimizer.lr_scaling=linear --optimizer.lr_base_batch=64 >run.log 2>&1 || { cat run.log; fail "training"; }
    cat run.log
    grep -qxF "learning rate 0.04 = optimizer.lr 0.02 x train.global_batch 128 / optimizer.lr_base_batch 64 (optimizer.lr_scaling = linear)" run.log ||
      fail "no line saying the scaled learning rate"
    for epoch in 1 2; do
      grep -qE "^epoch $epoch: test accuracy 0\.[0-9]{4}, loss [0-9]+\.[0-9]{4} on 10000 samples of $DATA_DIR/test.h5\$" run.log ||
        fail "no test line after epoch $epoch"
    done
    [ "$(grep -c '^epoch [0-9]*: test accuracy' run.log)" = 2 ] || fail "expected two epoch test lines"
    # The evaluation after the last epoch, shared by the ranks, is the final one rank 0 makes alone.
    last=$(sed -n 's/^epoch 2: test accuracy \([0-9.]*\),.*/\1/p' run.log)
    grep -q "^test accuracy $last, " run.log || fail "epoch 2's test accuracy $last is not the final one"
    awk -v a="$last" 'BEGIN { exit !(a > 0.4) }' || fail "test accuracy $last: the model did not learn"
    metrics=ckpt/metrics.jsonl
    tests=$(grep '"test_accuracy"' $metrics)
    echo "$tests"
    [ "$(echo "$tests" | wc -l)" = 2 ] || fail "expected two test records in $metrics"
    [ "$(echo "$tests" | json_field epoch | paste -sd,)" = "1,2" ] || fail "test records' epochs"
    [ "$(echo "$tests" | json_field step | paste -sd,)" = "8,16" ] || fail "test records' steps"
    [ "$(echo "$tests" | json_field test_samples | paste -sd,)" = "10000,10000" ] || fail "test records' samples"
    awk -v r="$(echo "$tests" | tail -1 | json_field test_accuracy)" -v a="$last" 'BEGIN { exit !(r == a) }' ||
      fail "the record's accuracy is not the line's"
    intervals=$(grep -v '"test_accuracy"' $metrics)
    [ "$(echo "$intervals" | wc -l)" = 4 ] || fail "expected four interval records"
    for norm in $(echo "$intervals" | json_field grad_norm); do
      awk -v g="$norm" 'BEGIN { exit !(g > 0) }' || fail "grad_norm $norm in an interval record"
    done
    [ "$(echo "$intervals" | json_field lr | sort -u)" = 0.04 ] || fail "the records' lr is not the scaled one"
    # Evaluating takes nothing from training: the same parameters as a run without it.
    run_np 2 300 train --config run.ini "${options[@]}" --optimizer.lr_scaling=linear --optimizer.lr_base_batch=64 \
      --checkpoint.dir="$WORK/plain" >plain.log 2>&1 || { cat plain.log; fail "training without evaluations"; }
    ! grep -q "^epoch [0-9]*: test" plain.log || fail "evaluated after an epoch with train.eval_every_epochs = 0"
    [ "$(group_hash ckpt/step-16.h5 /params)" = "$(group_hash plain/step-16.h5 /params)" ] ||
      fail "evaluating after epochs changed the training"
    # The report draws the test accuracy beside the training batches'.
    "$MGTRAIN" report ckpt >/dev/null || fail "report"
    grep -q ">test<" ckpt/report.svg || fail "no test series in the report"
    ;;
  device_memory)
    # The GPU path's program (the step in device memory, on the CPU backend) clips and smooths as
    # the step in place does.
    write_config run.ini
    for memory in host device; do
      in_memory $memory run_np 2 300 train --config run.ini "${options[@]}" --train.max_steps=40 --train.log_every=10 \
        --checkpoint.dir="$WORK/$memory" >$memory.log 2>&1 || { cat $memory.log; fail "the step in $memory memory"; }
    done
    same_losses host/metrics.jsonl device/metrics.jsonl || fail "the step's losses in device memory differ from in place"
    "$MGTRAIN" compare host/step-40.h5 device/step-40.h5 --rtol 1e-5 ||
      fail "the step's parameters in device memory differ from in place"
    ;;
  deterministic)
    # Deterministic mode with clipping and smoothing: the same parameter bits at np=1 and np=2. Each
    # option alone changes the bits, so the equality is not that of runs where they did nothing.
    write_config run.ini "[sync]" "deterministic = true"
    train_hash() {  # train_hash NAME NP [overrides...]
      local name=$1 np=$2; shift 2
      run_np "$np" 300 train --config run.ini --train.max_steps=20 --checkpoint.dir="$WORK/$name" "$@" \
        >"$name.log" 2>&1 || { cat "$name.log"; fail "run $name"; }
      group_hash "$WORK/$name/step-20.h5" /params
    }
    ref=$(train_hash np1 1 "${options[@]}")
    h=$(train_hash np2 2 "${options[@]}")
    echo "np=1: $ref; np=2: $h"
    [ "$h" = "$ref" ] || fail "clipping and smoothing at np=2 differ from np=1"
    grep -o '"grad_norm":[^,]*' np1/metrics.jsonl >np1.norms
    grep -o '"grad_norm":[^,]*' np2/metrics.jsonl >np2.norms
    cmp -s np1.norms np2.norms || fail "the reported gradient norms differ between np=1 and np=2"
    [ "$(train_hash unclipped 2 --train.label_smoothing=0.1)" != "$ref" ] || fail "clip_norm changed nothing"
    [ "$(train_hash unsmoothed 2 --optimizer.clip_norm=0.5)" != "$ref" ] || fail "label_smoothing changed nothing"
    ;;
  refused)
    write_config run.ini
    rc=0
    run_np 2 120 train --config run.ini --train.label_smoothing=1 >smooth.log 2>&1 || rc=$?
    [ $rc -ne 0 ] || fail "label_smoothing = 1 was accepted"
    one_error_line smooth.log | grep -qF "config key 'train.label_smoothing' (command line): expected a value in [0, 1), got '1'" ||
      fail "the message does not say the range"
    rc=0
    run_np 3 120 train --config run.ini --sync.name=param_server --optimizer.clip_norm=1 >ps.log 2>&1 || rc=$?
    [ $rc -ne 0 ] || fail "clip_norm with a parameter server was accepted"
    one_error_line ps.log | grep -qF "optimizer.clip_norm = 1 is not supported with sync.name = param_server" ||
      fail "the message does not name the key and the strategy"
    no_ranks_left
    ;;
  *) fail "unknown case $1" ;;
esac
