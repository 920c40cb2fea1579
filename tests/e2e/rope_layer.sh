#!/usr/bin/env bash
# A layer whose constants are computed on the host: examples/plugin's rope (rotary position
# embedding, its cos/sin tables built in plan() and uploaded with LayerPlanner::upload_array),
# built out of tree against the installed SDK. Its backward agrees with finite differences
# (rope_gradients, mgtrain/gradient_check.hpp); in a declared language model it trains at np=2 in
# deterministic mode to the same bits twice and at np=1 (one micro-shard at a time: the uploaded
# tables are not saved per shard), its embedding differently with another base (the tables are
# there, not zeros), through the GPU path's program on the CPU backend (the upload into the
# step's own memory) to the parameters of in place, and a shape it cannot take gets one line.
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH
require_fortunes

build_example_plugins libmgtrain-layer-rope.so
"$PLUGIN_BUILD/rope_gradients" >gradients.log 2>&1 || { cat gradients.log; fail "rope's gradients"; }
grep -q "^gradients of layer 'rope1': all [0-9]* elements checked within the tolerance" gradients.log ||
  { cat gradients.log; fail "rope_gradients did not report its check"; }

head -c 60000 "$FORTUNES/cookie" >train.txt
tail -c 20000 "$FORTUNES/cookie" >test.txt
for split in train test; do
  "$MGTRAIN" data convert --text $split.txt --out $split.h5 >>convert.log 2>&1 || { cat convert.log; fail "convert"; }
done
block="residual { layernorm, linear 96, attention 2 causal, linear 32 }, layernorm, tied_head"
common=(--config "$EXAMPLES/text_gpt_layers.ini" --plugin-path "$PLUGIN_BUILD/plugins" --data.train="$WORK/train.h5"
        --data.test="$WORK/test.h5" --checkpoint.every_steps=0 --model.input_shape=16 --train.max_steps=8
        --train.global_batch=8 --train.warmup_steps=2 --train.log_every=4)
rope=("--model.layers=embed 256 32, rope, $block")
deterministic=(--sync.deterministic=true --sync.micro_shards=2)

for run in a b; do
  run_np 2 300 train "${common[@]}" "${rope[@]}" "${deterministic[@]}" --checkpoint.dir="$WORK/$run" \
    >$run.log 2>&1 || { cat $run.log; fail "the rope layer, deterministic run $run"; }
done
[ "$(group_hash a/step-8.h5 /params)" = "$(group_hash b/step-8.h5 /params)" ] ||
  fail "two deterministic runs with the rope layer ended with different parameters"
run_np 1 300 train "${common[@]}" "${rope[@]}" "${deterministic[@]}" --checkpoint.dir="$WORK/np1" >np1.log 2>&1 ||
  { cat np1.log; fail "the rope layer, deterministic at np=1"; }
[ "$(group_hash a/step-8.h5 /params)" = "$(group_hash np1/step-8.h5 /params)" ] ||
  fail "deterministic: the rope layer's model differs between np=1 and np=2"
# The embedding's gradient passes through rope's tables alone: with another base its table must
# train otherwise (tables that never reached the executor, zeros, would leave both untouched).
run_np 2 300 train "${common[@]}" "--model.layers=embed 256 32, rope 500, $block" "${deterministic[@]}" \
  --checkpoint.dir="$WORK/base500" >base500.log 2>&1 || { cat base500.log; fail "the rope layer with base 500"; }
embedding_hash() { h5dump -d /params/embed1.weight -b LE -o "$WORK/.embed" "$1" >/dev/null && sha256sum <"$WORK/.embed"; }
[ "$(embedding_hash a/step-8.h5)" != "$(embedding_hash base500/step-8.h5)" ] ||
  fail "the embedding trained the same under rope of base 10000 and 500: its tables did not reach the executor"
echo "rope: deterministic np=2 twice and np=1, the same bits"

for memory in host device; do
  in_memory $memory run_np 2 300 train "${common[@]}" "${rope[@]}" --checkpoint.dir="$WORK/$memory" \
    >$memory.log 2>&1 || { cat $memory.log; fail "the rope layer with the step in $memory memory"; }
done
"$MGTRAIN" compare host/step-8.h5 device/step-8.h5 --rtol 1e-5 >compare.txt 2>&1 ||
  { cat compare.txt; fail "the rope layer: the step in device memory differs from in place"; }

run_np 2 120 train "${common[@]}" "--model.layers=embed 256 31, rope, layernorm, tied_head" \
  --checkpoint.dir="$WORK/bad" >bad.log 2>&1 && fail "rope over an odd width trained"
one_error_line bad.log | grep -qF "entry 2 'rope' (rope1): rope takes [B, T, D] activations with D even, got [1, 16, 31]" ||
  { cat bad.log; fail "rope over an odd width: no one line naming the entry"; }
echo "PASS"
