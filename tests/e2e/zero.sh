#!/usr/bin/env bash
# The sharded optimizer (sync.name = zero, ZeRO stage 1) against allreduce: the same parameters
# within a tolerance (MLP and CNN, SGD with momentum and Adam, clipping included); bit for bit in
# deterministic mode at np=1, 2 and 4, and those of allreduce; checkpoints with the whole state,
# resumed across strategies and world sizes and read by mgtrain eval; the optimizer state per rank
# falling as 1 / ranks; bad values refused with one line.
# Usage: zero.sh parity_mlp|parity_cnn|deterministic|resume|memory|device_memory|nonfinite|bad_config
source "$(dirname "$0")/lib.sh"
write_config run.ini
adam=(--optimizer.name=adam --optimizer.lr=0.002)
small_cnn=(--model.name=cnn --model.channels=8,16 --model.hidden=32)

train() {  # train NAME NP STEPS [overrides...]: a run into $WORK/NAME
  local name=$1 np=$2 steps=$3; shift 3
  run_np "$np" 900 train --config run.ini --train.max_steps="$steps" --checkpoint.dir="$WORK/$name" "$@" \
    >"$name.log" 2>&1 || { cat "$name.log"; fail "run $name"; }
}

# Zero and allreduce after the same steps: compare's max |a - b| per parameter, within RTOL of
# each parameter's largest magnitude.
parity() {  # parity NAME NP STEPS RTOL [overrides...]
  local name=$1 np=$2 steps=$3 rtol=$4; shift 4
  train "$name-allreduce" "$np" "$steps" --sync.name=allreduce "$@"
  train "$name-zero" "$np" "$steps" --sync.name=zero "$@"
  grep -q "sync.name = zero" "$name-zero.log" || fail "$name: zero did not say it shards"
  echo "== $name, np=$np, $steps steps: zero against allreduce"
  "$MGTRAIN" compare "$name-allreduce/step-$steps.h5" "$name-zero/step-$steps.h5" --rtol "$rtol" ||
    fail "$name: zero and allreduce differ by more than $rtol relative"
}

case $1 in
  parity_mlp)
    # run.ini's optimizer is sgd with momentum (adam runs drop the key, with a note).
    parity mlp_sgd 2 100 1e-5 --optimizer.clip_norm=0.5
    parity mlp_adam 2 100 1e-5 "${adam[@]}"
    # Four ranks sum in other orders than all-reduce does: the last bits differ, within the tolerance.
    parity mlp_adam_np4 4 100 1e-4 "${adam[@]}" --optimizer.clip_norm=1
    # Three ranks: the buffer is not a whole number of pieces, the last rank's piece is padded.
    parity mlp_adam_np3 3 60 1e-4 "${adam[@]}" --train.global_batch=120
    # The comparison can fail: another seed is far off.
    train other 2 100 --sync.name=zero --train.seed=99
    ! "$MGTRAIN" compare mlp_sgd-zero/step-100.h5 other/step-100.h5 --rtol 1e-5 >/dev/null ||
      fail "compare accepted different runs"
    ;;
  parity_cnn)
    parity cnn_sgd 2 60 1e-5 "${small_cnn[@]}"
    parity cnn_adam 2 60 1e-5 "${small_cnn[@]}" "${adam[@]}"
    ;;
  deterministic)
    # Dropout, clipping and Adam: the norm over the whole gradient, in its one order, at any world size.
    det=(--sync.deterministic=true --model.dropout=0.1 --optimizer.clip_norm=0.5 "${adam[@]}")
    train allreduce 2 100 --sync.name=allreduce "${det[@]}"
    ref=$(group_hash allreduce/step-100.h5 /params)
    echo "allreduce np=2: $ref"
    for np in 1 2 4; do
      train zero$np "$np" 100 --sync.name=zero "${det[@]}"
      h=$(group_hash zero$np/step-100.h5 /params)
      echo "zero np=$np: $h"
      [ "$h" = "$ref" ] || fail "deterministic zero at np=$np differs from deterministic allreduce"
      # The whole optimizer state in the checkpoint, bit for bit that of allreduce.
      for state in exp_avg exp_avg_sq; do
        [ "$(group_hash zero$np/step-100.h5 /optimizer/$state)" = "$(group_hash allreduce/step-100.h5 /optimizer/$state)" ] ||
          fail "zero np=$np: the checkpoint's /optimizer/$state differs from allreduce's"
      done
    done
    # The CNN (convolutions one micro-shard at a time) at np=1 and 4.
    train cnn_allreduce 2 30 --sync.name=allreduce "${det[@]}" "${small_cnn[@]}"
    for np in 1 4; do
      train cnn_zero$np "$np" 30 --sync.name=zero "${det[@]}" "${small_cnn[@]}"
      [ "$(group_hash cnn_zero$np/step-30.h5 /params)" = "$(group_hash cnn_allreduce/step-30.h5 /params)" ] ||
        fail "deterministic CNN: zero at np=$np differs from allreduce"
    done
    # Outside deterministic mode four ranks show in the bits, or the equality above proves nothing.
    train plain4 4 100 --sync.name=zero "${det[@]}" --sync.deterministic=false
    [ "$(group_hash plain4/step-100.h5 /params)" != "$ref" ] || fail "default mode at np=4 matched bit for bit"
    ;;
  resume)
    # Deterministic Adam, so that a resume that lost or misplaced any optimizer state shows in the bits.
    det=(--sync.deterministic=true "${adam[@]}" --checkpoint.every_steps=50)
    train straight 2 100 --sync.name=allreduce "${det[@]}"
    ref=$(group_hash straight/step-100.h5 /params)
    # zero at np=4, then allreduce at np=1; allreduce at np=1, then zero at np=2; zero at np=2, then zero at np=4.
    for plan in zero:4:allreduce:1 allreduce:1:zero:2 zero:2:zero:4; do
      IFS=: read -r first np1 second np2 <<<"$plan"
      name=${first}${np1}_${second}${np2}
      train "$name" "$np1" 50 --sync.name="$first" "${det[@]}"
      run_np "$np2" 900 train --config run.ini --train.max_steps=100 --checkpoint.dir="$WORK/$name" \
        --sync.name="$second" "${det[@]}" --resume latest >"$name.resumed.log" 2>&1 ||
        { cat "$name.resumed.log"; fail "$name: the resume"; }
      grep -q "resumed from step 50" "$name.resumed.log" || { cat "$name.resumed.log"; fail "$name: no resume"; }
      h=$(group_hash "$name/step-100.h5" /params)
      echo "$first np=$np1 50 steps, then $second np=$np2: $h (straight allreduce: $ref)"
      [ "$h" = "$ref" ] || fail "$first at np=$np1 resumed under $second at np=$np2 differs from the straight run"
    done
    # A zero checkpoint holds the whole state (the shapes of the parameters) and mgtrain eval reads it.
    h5ls -r zero4_allreduce1/step-50.h5 | grep -q "^/optimizer/exp_avg/fc1.weight .*{256, 784}" ||
      { h5ls -r zero4_allreduce1/step-50.h5; fail "the zero checkpoint's state is not whole"; }
    "$MGTRAIN" eval --checkpoint zero2_zero4/step-100.h5 --data "$DATA_DIR/test.h5" --json >eval.log 2>&1 ||
      { cat eval.log; fail "mgtrain eval of a zero checkpoint"; }
    cat eval.log
    accuracy=$(grep '^{' eval.log | json_field accuracy)
    awk -v a="$accuracy" 'BEGIN { exit !(a > 0.7) }' || fail "accuracy $accuracy of the zero checkpoint"
    ;;
  memory)
    # Adam's state bytes per rank for the CNN example, from the line rank 0 prints at the start.
    cnn=(--config "$EXAMPLES/fashion_mnist_cnn.ini" --data.train="$DATA_DIR/train.h5" --data.test=
         --optimizer.name=adam --optimizer.lr=0.001 --train.max_steps=2 --checkpoint.every_steps=0)
    declare -A bytes
    for np in 1 2 4; do
      run_np $np 600 train "${cnn[@]}" --sync.name=zero --checkpoint.dir="$WORK/mem$np" >mem$np.log 2>&1 ||
        { cat mem$np.log; fail "zero np=$np"; }
      line=$(grep "^optimizer state: " mem$np.log) || { cat mem$np.log; fail "np=$np: no optimizer state line"; }
      echo "np=$np: $line"
      bytes[$np]=$(sed -n 's/^optimizer state: \([0-9]*\) bytes per rank.*/\1/p' <<<"$line")
    done
    # allreduce through MPI keeps the whole state on every rank; through the node's shared memory
    # (its default on one node) the ranks split the update, and the state, as zero does.
    run_np 2 600 train "${cnn[@]}" --sync.name=allreduce --sync.shared_memory=off --checkpoint.dir="$WORK/memar" \
      >memar.log 2>&1 || { cat memar.log; fail "allreduce np=2"; }
    grep "^optimizer state: " memar.log
    full=$(sed -n 's/^optimizer state: \([0-9]*\) bytes per rank.*/\1/p' memar.log)
    [ "${bytes[1]}" = "$full" ] || fail "zero at np=1 keeps ${bytes[1]} bytes, allreduce $full"
    run_np 2 600 train "${cnn[@]}" --sync.name=allreduce --checkpoint.dir="$WORK/memshm" >memshm.log 2>&1 ||
      { cat memshm.log; fail "allreduce np=2 through shared memory"; }
    grep "^optimizer state: " memshm.log
    bytes[shm]=$(sed -n 's/^optimizer state: \([0-9]*\) bytes per rank.*/\1/p' memshm.log)
    # 1 / ranks of the whole, plus a little padding: zero's at most a float per bucket and buffer,
    # the shared memory's parts whole cache lines (the 16-float-aligned buffer halved: at most 8
    # floats per buffer).
    for np in 2 4 shm; do
      ranks=${np/shm/2}
      awk -v b="${bytes[$np]}" -v f="$full" -v n=$ranks 'BEGIN { exit !(b >= f / n && b <= f / n + 64) }' ||
        fail "$np: ${bytes[$np]} bytes of optimizer state a rank, expected about $full / $ranks"
    done
    ;;
  device_memory)
    # Under the test hook that runs the step as a GPU rank does, zero keeps to the CPU path in place:
    # the same bits as without it.
    train host 2 40 --sync.name=zero
    MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1 train device 2 40 --sync.name=zero
    "$MGTRAIN" compare host/step-40.h5 device/step-40.h5 --rtol 0 || fail "zero under the device-memory hook differs"
    ;;
  nonfinite)
    # A NaN in rank 1's gradient at step 7 reaches one rank's shard only: every rank skips the step.
    MGTRAIN_TEST_NAN_AT=1:7 train skip 2 20 --sync.name=zero --train.nonfinite=skip --json
    grep -q "non-finite gradient at step 7 (.*): step skipped" skip.log || { cat skip.log; fail "no warning for step 7"; }
    [ "$(grep '^{' skip.log | json_field skipped_steps)" = "1" ] || fail "skipped_steps is not 1"
    loss=$(grep '^{' skip.log | json_field final_loss)
    awk -v l="$loss" 'BEGIN { exit !(l == l + 0 && l < 5) }' || fail "final loss $loss is not a finite number"
    ;;
  bad_config)
    for bad in "--sync.bucket_mb=0:sync.bucket_mb" "--sync.micro_shards=3 --sync.deterministic=true:sync.micro_shards"; do
      args=${bad%:*} key=${bad##*:}
      set +e
      # shellcheck disable=SC2086
      run_np 2 120 train --config run.ini --sync.name=zero $args --checkpoint.dir="$WORK/bad" >bad.log 2>&1
      rc=$?
      set -e
      [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat bad.log; fail "$args: exit $rc"; }
      one_error_line bad.log | grep -qF "$key" || fail "$args: the error does not name $key"
    done
    ;;
  *) fail "unknown case $1" ;;
esac
