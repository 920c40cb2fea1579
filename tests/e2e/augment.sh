#!/usr/bin/env bash
# Augmentation in the reader (data.augment = crop:4,flip): each sample's crop and flip are drawn
# from (seed, epoch, sample), so in deterministic mode the parameters are the same bits at np=1 and
# np=2, and a run stopped and resumed matches one that was not; a bad list or flat samples stop the
# job with one line naming data.augment.
# Usage: augment.sh world_sizes | resume | bad_entry | flat_samples
source "$(dirname "$0")/lib.sh"
# A global batch of 2048 makes an epoch 29 steps, so 40 steps cross into epoch 1 (other draws).
write_config run.ini "[data]" "augment = crop:4,flip" "[sync]" "deterministic = true" "[train]" \
  "global_batch = 2048" "epochs = 2" "[data]" "test ="
steps=40

train_hash() {  # train_hash NAME NP [overrides...] -> SHA-256 of /params after $steps steps
  local name=$1 np=$2; shift 2
  run_np "$np" 600 train --config run.ini --train.max_steps=$steps --checkpoint.dir="$WORK/$name" \
    --checkpoint.every_steps=0 "$@" >"$name.log" 2>&1 || { cat "$name.log"; fail "run $name"; }
  group_hash "$WORK/$name/step-$steps.h5" /params
}

case $1 in
  world_sizes)
    ref=$(train_hash np1 1)
    h=$(train_hash np2 2)
    echo "augmented, np=1: $ref; np=2: $h"
    [ "$h" = "$ref" ] || fail "np=2 differs from np=1 with augmentation on"
    # Without augmentation the bits differ, or the comparison above shows nothing about it.
    plain=$(train_hash plain 1 --data.augment=)
    [ "$plain" != "$ref" ] || fail "augmentation changed nothing"
    grep -q "^augment = crop:4,flip" np1.log || { cat np1.log; fail "resolved config does not show data.augment"; }
    ;;
  resume)
    ref=$(train_hash straight 2)
    run_np 2 600 train --config run.ini --train.max_steps=20 --checkpoint.dir="$WORK/stopped" >a.log 2>&1 ||
      { cat a.log; fail "first half"; }
    run_np 2 600 train --config run.ini --train.max_steps=$steps --checkpoint.dir="$WORK/stopped" --resume latest \
      >b.log 2>&1 || { cat b.log; fail "resume"; }
    grep -q "resumed from step 20" b.log || { cat b.log; fail "did not resume from step 20"; }
    h=$(group_hash "$WORK/stopped/step-$steps.h5" /params)
    echo "40 straight: $ref; 20 + 20 resumed: $h"
    [ "$h" = "$ref" ] || fail "a resumed run differs from an uninterrupted one with augmentation on"
    ;;
  bad_entry)
    set +e
    run_np 2 120 train --config run.ini --data.augment=crop:x,flip >bad.log 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat bad.log; fail "exit status $rc"; }
    line=$(one_error_line bad.log)
    echo "$line" | grep -q "config key 'data.augment' (command line): entry 'crop:x' of 'crop:x,flip' has padding 'x'" ||
      fail "the error does not name the key and the entry: $line"
    no_ranks_left
    ;;
  flat_samples)
    awk 'BEGIN { for (i = 0; i < 64; i++) { line = i % 10; for (j = 0; j < 784; j++) line = line ",0"; print line } }' >flat.csv
    "$MGTRAIN" data convert --csv flat.csv --shape 784 --out flat.h5 >/dev/null
    set +e
    run_np 2 120 train --config run.ini --data.train="$WORK/flat.h5" --train.global_batch=8 >flat.log 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat flat.log; fail "exit status $rc"; }
    line=$(one_error_line flat.log)
    echo "$line" | grep -q "data.augment needs samples of shape \[C, H, W\], but data file '$WORK/flat.h5' has samples of shape \[784\]" ||
      fail "the error does not name data.augment and the sample shape: $line"
    no_ranks_left
    ;;
  *) fail "unknown case $1" ;;
esac
