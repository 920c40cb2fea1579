#!/usr/bin/env bash
# The resnet model plugin (residual blocks with batch norm) at np=2 under mpirun: it trains (the
# loss falls), its checkpoint holds the batch-norm running statistics under /buffers and `mgtrain
# eval` uses them; the step in device memory (the GPU's form, in_memory in lib.sh) gives the same
# parameters and buffers as in place; stopping and resuming gives the straight run's bits, buffers
# included; deterministic mode gives the same parameter and running-statistics bits at np=1 and
# np=2 (batch statistics per micro-shard; running statistics moved on the first micro-shard). Usage: resnet.sh train|resume|deterministic
source "$(dirname "$0")/lib.sh"
write_config run.ini "[model]" "name = resnet" "depth = 8" "width = 8" "[optimizer]" "lr = 0.1" "[train]" "log_every = 10"
common=(--config run.ini --train.max_steps=60)
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }

case $1 in
  train)
    for memory in host device; do
      in_memory $memory run_np 2 600 train "${common[@]}" --checkpoint.dir="$WORK/$memory" >$memory.log 2>&1 ||
        { cat $memory.log; fail "resnet with the step in $memory memory"; }
    done
    first=$(losses host/metrics.jsonl | head -1)
    last=$(losses host/metrics.jsonl | tail -1)
    echo "resnet-8 at np=2: loss $first (step 10) -> $last (step 60)"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a) }' || { cat host.log; fail "the loss did not fall"; }
    h5ls -r host/step-60.h5 >listing.txt
    grep -q "^/buffers/layer2\.0\.shortcut\.1\.running_var " listing.txt ||
      { cat listing.txt; fail "no batch-norm running statistics under /buffers"; }
    grep -q "^device: cpu (the CPU backend, in memory of the step's own" device.log || fail "no device line"
    "$MGTRAIN" compare host/step-60.h5 device/step-60.h5 --rtol 1e-5 ||
      fail "the parameters in device memory differ from in place"
    [ "$(group_hash host/step-60.h5 /buffers)" = "$(group_hash device/step-60.h5 /buffers)" ] ||
      fail "the running statistics in device memory differ from in place"
    accuracy=$("$MGTRAIN" eval --checkpoint host/step-60.h5 --data "$DATA_DIR/test.h5" --json | json_field accuracy)
    echo "test accuracy after 60 steps, with the running statistics: $accuracy"
    # Chance is 0.1; running statistics that were not kept or not used give about that.
    awk -v a="$accuracy" 'BEGIN { exit !(a > 0.35) }' || fail "test accuracy $accuracy: the running statistics are off"
    ;;
  resume)
    run_np 2 600 train "${common[@]}" --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
      { cat straight.log; fail "the straight run"; }
    run_np 2 600 train "${common[@]}" --train.max_steps=30 --checkpoint.dir="$WORK/split" >split1.log 2>&1 ||
      { cat split1.log; fail "the first half"; }
    run_np 2 600 train "${common[@]}" --checkpoint.dir="$WORK/split" --resume latest >split2.log 2>&1 ||
      { cat split2.log; fail "the resumed half"; }
    for group in /params /buffers /optimizer/momentum; do
      [ "$(group_hash straight/step-60.h5 $group)" = "$(group_hash split/step-60.h5 $group)" ] ||
        fail "$group after stop and resume differs from the straight run"
    done
    ;;
  deterministic)
    for np in 1 2; do
      run_np $np 600 train "${common[@]}" --train.max_steps=20 --sync.deterministic=true --sync.micro_shards=4 \
        --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 || { cat np$np.log; fail "deterministic np=$np"; }
    done
    for group in /params /buffers; do
      [ "$(group_hash np1/step-20.h5 $group)" = "$(group_hash np2/step-20.h5 $group)" ] ||
        fail "deterministic resnet $group differ between np=1 and np=2"
    done
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
