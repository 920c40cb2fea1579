#!/usr/bin/env bash
# The `layers` model plugin (a model declared in model.layers) at np=2 under mpirun: the example
# config trains (the loss falls) and gives the same parameter bits as `model.name = cnn` with the
# same seed, its layers having the cnn's names; a declared model with batch norm and a residual
# block gives the same bits at np=1 and np=2 in deterministic mode. Also the ResNet-20 example
# starts and trains a few steps. The GPT example (a list that starts with embed) trains on text:
# the loss falls, the test loss is per token, its checkpoint generates text, deterministic mode
# gives the same bits at np=1 and np=2, the step in device memory (the GPU's form) agrees with the
# step in place, and a bad entry or a file the list cannot read gets one error line before step 1.
# A GPT whose embed has no position table (embed V D nopositions) has no embed1.position in its
# checkpoint, its loss falls, deterministic mode gives the same bits at np=1 and np=2 and a resume
# the straight run's, the step in device memory agrees, its checkpoint generates with the KV cache
# checked against the model's forward, and a bad word after embed V D gets one line before step 1.
# Usage: layers_model.sh cnn | deterministic | resnet_example | gpt | gpt_nopositions
source "$(dirname "$0")/lib.sh"
data=(--data.train="$DATA_DIR/train.h5" --data.test= --checkpoint.every_steps=0)
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }

# The example's split of fortunes' cookie, as token files train.h5 and test.h5 in $WORK.
convert_cookie() {
  require_fortunes
  head -c 220000 "$FORTUNES/cookie" >train.txt
  tail -c +220001 "$FORTUNES/cookie" >test.txt
  for split in train test; do
    "$MGTRAIN" data convert --text $split.txt --out $split.h5 >>convert.log 2>&1 || { cat convert.log; fail "convert"; }
  done
}

case $1 in
  cnn)
    for model in layers cnn; do
      run_np 2 600 train --config "$EXAMPLES/fashion_mnist_$model.ini" "${data[@]}" --train.max_steps=30 \
        --train.log_every=10 --checkpoint.dir="$WORK/$model" >$model.log 2>&1 || { cat $model.log; fail "$model"; }
    done
    first=$(losses layers/metrics.jsonl | head -1)
    last=$(losses layers/metrics.jsonl | tail -1)
    echo "declared cnn at np=2: loss $first (step 10) -> $last (step 30)"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || { cat layers.log; fail "the loss did not fall"; }
    h5ls layers/step-30.h5/params >names.txt
    grep -q '^fc2\.weight ' names.txt || { cat names.txt; fail "no parameter fc2.weight"; }
    [ "$(group_hash layers/step-30.h5 /params)" = "$(group_hash cnn/step-30.h5 /params)" ] ||
      fail "the declared cnn's parameters differ from model.name = cnn's"
    ;;
  deterministic)
    write_config run.ini "[model]" "name = layers" \
      "layers = conv 8 k3 p1, bn, relu, residual { conv 8 k3 p1, bn, relu, conv 8 k3 p1, bn }, relu, avgpool 2, gap, linear 10"
    for np in 1 2; do
      run_np $np 600 train --config run.ini "${data[@]}" --train.max_steps=10 --sync.deterministic=true \
        --sync.micro_shards=4 --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 || { cat np$np.log; fail "np=$np"; }
    done
    h5ls -r np1/step-10.h5 >listing.txt
    grep -q '^/buffers/res1\.bn2\.running_var ' listing.txt || { cat listing.txt; fail "no res1.bn2 running statistics"; }
    [ "$(group_hash np1/step-10.h5 /params)" = "$(group_hash np2/step-10.h5 /params)" ] ||
      fail "deterministic declared-model parameters differ between np=1 and np=2"
    ;;
  resnet_example)
    run_np 2 600 train --config "$EXAMPLES/fashion_mnist_resnet.ini" "${data[@]}" --train.max_steps=4 \
      --train.log_every=2 --checkpoint.dir="$WORK/resnet" >resnet.log 2>&1 || { cat resnet.log; fail "resnet example"; }
    [ "$(losses resnet/metrics.jsonl | wc -l)" -eq 2 ] || { cat resnet.log; fail "no metrics for steps 2 and 4"; }
    grep -q '^augment = crop:4,flip' resnet.log || { cat resnet.log; fail "the resolved config lacks data.augment"; }
    ;;
  gpt)
    convert_cookie
    text=(--data.train="$WORK/train.h5" --data.test="$WORK/test.h5" --checkpoint.every_steps=0)
    # The example as it is, but for a warm-up that fits a short run.
    run_np 2 600 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" --train.max_steps=40 \
      --train.warmup_steps=5 --train.log_every=10 --checkpoint.dir="$WORK/gpt" --json >gpt.json 2>gpt.log ||
      { cat gpt.log; fail "the declared gpt"; }
    first=$(losses gpt/metrics.jsonl | head -1)
    last=$(losses gpt/metrics.jsonl | tail -1)
    echo "declared gpt at np=2: loss $first (step 10) -> $last (step 40)"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.85 * a) }' || { cat gpt.log; fail "the loss did not fall"; }
    test_loss=$(tail -1 gpt.json | json_field test_loss)
    awk -v l="$test_loss" 'BEGIN { exit !(l > 0.5 && l < 5.0) }' || { tail -1 gpt.json; fail "test_loss '$test_loss'"; }
    h5ls gpt/step-40.h5/params >names.txt
    for name in embed1.weight embed1.position res1.ln1.weight res1.fc1.weight res8.fc2.bias ln1.weight; do
      grep -q "^$name " names.txt || { cat names.txt; fail "no parameter $name"; }
    done
    # The tied head has no parameter of its own.
    ! grep -q "^head" names.txt || { cat names.txt; fail "the tied head has a parameter"; }
    for run in 1 2; do
      "$MGTRAIN" generate --checkpoint gpt/step-40.h5 --prompt "The " --tokens 40 --seed 3 >generated$run.txt \
        2>generate.log || { cat generate.log; fail "generate"; }
    done
    [ "$(wc -c <generated1.txt)" -ge 40 ] || fail "generate wrote $(wc -c <generated1.txt) bytes"
    cmp -s generated1.txt generated2.txt || fail "the same seed generated different text"
    # Deterministic mode: the embedding's scatter-add and the tied head over micro-shards.
    small=(--model.input_shape=32 --model.layers="embed 256 32, residual { layernorm, linear 96, attention 2 causal, \
linear 32 }, residual { layernorm, linear 128, gelu, linear 32 }, layernorm, tied_head" --train.max_steps=8
      --train.global_batch=16)
    deterministic=(--sync.deterministic=true --sync.micro_shards=4)
    for np in 1 2; do
      run_np $np 600 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" "${small[@]}" "${deterministic[@]}" \
        --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 || { cat np$np.log; fail "deterministic np=$np"; }
    done
    [ "$(group_hash np1/step-8.h5 /params)" = "$(group_hash np2/step-8.h5 /params)" ] ||
      fail "deterministic declared-gpt parameters differ between np=1 and np=2"
    # The GPU path's program (the step in device memory), checked on the CPU backend.
    for memory in host device; do
      in_memory $memory run_np 2 600 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" "${small[@]}" \
        --checkpoint.dir="$WORK/$memory" >$memory.log 2>&1 || { cat $memory.log; fail "the step in $memory memory"; }
    done
    "$MGTRAIN" compare host/step-8.h5 device/step-8.h5 --rtol 1e-5 >compare.txt 2>&1 ||
      { cat compare.txt; fail "the parameters with the step in device memory differ from in place"; }
    # A bad entry: one line, naming it, before step 1.
    run_np 2 120 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" --checkpoint.dir="$WORK/bad" \
      --model.input_shape=32 --model.layers="embed 256 32, linear 96, attention 3, linear 32, tied_head" >bad.log 2>&1 &&
      fail "a bad attention entry trained"
    line=$(one_error_line bad.log)
    [[ $line == *"entry 3 'attention 3' (attn1): 3 heads do not divide dim = 32 (the input's width 96 / 3)"* ]] ||
      fail "unexpected error line: $line"
    ! grep -q "step 1/" bad.log || fail "the bad list reached step 1"
    # The data against the list: the keys named are the list's.
    "$MGTRAIN" train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" --checkpoint.dir="$WORK/bad" \
      --model.input_shape=32 --model.layers="embed 128 32, layernorm, tied_head" >vocab.log 2>&1 &&
      fail "a vocabulary smaller than the file's trained"
    line=$(one_error_line vocab.log)
    [[ $line == *"more than the model's vocabulary of 128 (the V of model.layers' embed V D)"* ]] ||
      fail "unexpected error line: $line"
    ;;
  gpt_nopositions)
    convert_cookie
    text=(--data.train="$WORK/train.h5" --data.test="$WORK/test.h5")
    list="embed 256 32 nopositions, residual { layernorm, linear 96, attention 2 causal, linear 32 }, \
residual { layernorm, linear 128, gelu, linear 32 }, layernorm, tied_head"
    small=(--model.input_shape=32 "--model.layers=$list" --train.global_batch=16 --train.warmup_steps=5)
    deterministic=(--sync.deterministic=true --sync.micro_shards=4)
    for np in 1 2; do
      run_np $np 600 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" "${small[@]}" "${deterministic[@]}" \
        --train.max_steps=40 --train.log_every=10 --checkpoint.every_steps=20 --checkpoint.dir="$WORK/np$np" \
        >np$np.log 2>&1 || { cat np$np.log; fail "deterministic np=$np"; }
    done
    first=$(losses np2/metrics.jsonl | head -1)
    last=$(losses np2/metrics.jsonl | tail -1)
    echo "gpt without positions at np=2: loss $first (step 10) -> $last (step 40)"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.85 * a) }' || { cat np2.log; fail "the loss did not fall"; }
    # The table alone: no position parameter, nor optimizer state for one.
    h5ls -r np2/step-40.h5 >listing.txt
    grep -q '^/params/embed1\.weight ' listing.txt || { cat listing.txt; fail "no parameter embed1.weight"; }
    ! grep -q 'position' listing.txt || { cat listing.txt; fail "a position table in the checkpoint"; }
    [ "$(group_hash np1/step-40.h5 /params)" = "$(group_hash np2/step-40.h5 /params)" ] ||
      fail "deterministic parameters without positions differ between np=1 and np=2"
    # A resume from step 20 gives the straight run's bits at step 40.
    run_np 2 600 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" "${small[@]}" "${deterministic[@]}" \
      --train.max_steps=40 --train.log_every=10 --checkpoint.every_steps=20 --checkpoint.dir="$WORK/resumed" \
      --resume "$WORK/np2/step-20.h5" >resumed.log 2>&1 || { cat resumed.log; fail "the resume from step 20"; }
    for group in /params /optimizer/exp_avg /optimizer/exp_avg_sq; do
      [ "$(group_hash np2/step-40.h5 $group)" = "$(group_hash resumed/step-40.h5 $group)" ] ||
        fail "$group after a resume at step 20 differs from the straight run"
    done
    # Generation: the KV cache without a position row, against the model's forward over the window
    # (the prompt and 40 tokens overflow the window of 32, so it slides too), repeatable.
    for run in 1 2; do
      "$MGTRAIN" generate --checkpoint np2/step-40.h5 --prompt "The " --tokens 40 --seed 3 --check-cache \
        >generated$run.txt 2>generate$run.log || { cat generate$run.log; fail "generate"; }
    done
    cat generate1.log
    grep -q "^cache check: the logits for [0-9]* tokens ([1-9][0-9]* after the window slid) are within" \
      generate1.log || fail "no cache check line, or the window never slid"
    ! grep -q "without a cache" generate1.log || fail "generated without the KV cache"
    [ "$(wc -c <generated1.txt)" -eq 40 ] || fail "generate wrote $(wc -c <generated1.txt) bytes"
    cmp -s generated1.txt generated2.txt || fail "the same seed generated different text"
    # The GPU path's program (the step in device memory, the embedding with a null position),
    # checked on the CPU backend.
    for memory in host device; do
      in_memory $memory run_np 2 600 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" "${small[@]}" \
        --train.max_steps=8 --checkpoint.every_steps=0 --checkpoint.dir="$WORK/$memory" >$memory.log 2>&1 ||
        { cat $memory.log; fail "the step in $memory memory"; }
    done
    "$MGTRAIN" compare host/step-8.h5 device/step-8.h5 --rtol 1e-5 >compare.txt 2>&1 ||
      { cat compare.txt; fail "the parameters with the step in device memory differ from in place"; }
    # A word after embed V D that is neither positions nor nopositions: one line, before step 1.
    run_np 2 120 train --config "$EXAMPLES/text_gpt_layers.ini" "${text[@]}" --checkpoint.dir="$WORK/bad" \
      --model.input_shape=32 --model.layers="embed 256 32 positions=none, layernorm, tied_head" >bad.log 2>&1 &&
      fail "embed 256 32 positions=none trained"
    line=$(one_error_line bad.log)
    [[ $line == *"config key 'model.layers' (command line): entry 1 'embed 256 32 positions=none': expected embed V D [positions|nopositions] with V (vocabulary) and D (width) positive integers"* ]] ||
      fail "unexpected error line: $line"
    ! grep -q "step 1/" bad.log || fail "the bad list reached step 1"
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
