#!/usr/bin/env bash
# The SDK's promise, on binaries: the example plugins built from each kept SDK version's headers
# and sources (tests/abi/sdk-<version>/, compiled by tests/abi into test-plugins/sdk-<version>/)
# run with today's mgtrain. For each version: the snapshot is as it was kept (its SHA-256 sums);
# `mgtrain plugins` finds its plugins usable; the model, optimizer, sync strategy and schedule
# train together at np=2 with the loss going down, and `mgtrain verify` finds a stopped and resumed
# run equal to the straight one (the sync strategy's own state through a checkpoint); the swish
# layer plugin in the config-declared `layers` model trains to the model plugin's parameters bit
# for bit; the rope layer plugin (constants uploaded from the host) trains a small language model.
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH
SRC=$(cd "$EXAMPLES/.." && pwd)

versions=0
for snapshot in "$SRC"/tests/abi/sdk-*; do
  version=${snapshot##*/sdk-}
  dir=$TEST_PLUGIN_DIR/sdk-$version
  versions=$((versions + 1))
  (cd "$snapshot" && sha256sum --quiet -c SHA256SUMS) ||
    fail "tests/abi/sdk-$version differs from its SHA256SUMS: a kept SDK is never edited (scripts/snapshot_sdk.sh)"

  "$MGTRAIN" plugins --plugin-path "$dir" >plugins-$version.txt 2>&1 || { cat plugins-$version.txt; fail "mgtrain plugins"; }
  for kn in "optimizer signsgd" "model swish_mlp" "layer swish" "sync bf16_ef" "schedule wsd" "layer rope"; do
    read -r kind name <<<"$kn"
    grep -qE "^$kind +$name +[^ ]+ +$dir/libmgtrain-$kind-$name.so" plugins-$version.txt ||
      { cat plugins-$version.txt; fail "SDK $version's $kind plugin '$name' is not usable with this mgtrain"; }
  done

  write_config run-$version.ini
  common=(--config run-$version.ini --plugin-path "$dir" --model.name=swish_mlp --model.hidden=64
          --optimizer.name=signsgd --optimizer.lr=0.001 --optimizer.momentum=0.9 --sync.name=bf16_ef
          --train.lr_schedule=wsd --train.warmup_steps=5)
  run_np 2 300 train "${common[@]}" --train.max_steps=50 --train.log_every=10 --checkpoint.dir="$WORK/train-$version" \
    --json >train-$version.log 2>&1 || { cat train-$version.log; fail "SDK $version's plugins did not train"; }
  first=$(sed -n 's/^epoch .* step 10\/[0-9]* loss \([0-9.]*\) .*/\1/p' train-$version.log | head -1)
  final=$(grep '^{.*"final_loss"' train-$version.log | tail -1 | json_field final_loss)
  [[ -n $first && -n $final ]] || { cat train-$version.log; fail "no loss at step 10 or at the end"; }
  awk -v a="$first" -v b="$final" 'BEGIN { exit !(b < 0.9 * a) }' ||
    { cat train-$version.log; fail "SDK $version's plugins: the loss did not go down ($first at step 10, $final at 50)"; }
  run_np 2 600 verify "${common[@]}" --steps 20 >verify-$version.log 2>&1 ||
    { cat verify-$version.log; fail "verify with SDK $version's plugins"; }
  grep -q "^PASS" verify-$version.log || { cat verify-$version.log; fail "SDK $version: the resumed run differs"; }

  layers=(--config run-$version.ini --plugin-path "$dir" --train.max_steps=20)
  run_np 2 300 train "${layers[@]}" --model.name=layers "--model.layers=flatten, linear 64, swish, linear 10" \
    --checkpoint.dir="$WORK/list-$version" >list-$version.log 2>&1 || { cat list-$version.log; fail "SDK $version's layer plugin"; }
  run_np 2 300 train "${layers[@]}" --model.name=swish_mlp --model.hidden=64 --checkpoint.dir="$WORK/model-$version" \
    >model-$version.log 2>&1 || { cat model-$version.log; fail "SDK $version's swish_mlp"; }
  [ "$(group_hash list-$version/step-20.h5 /params)" = "$(group_hash model-$version/step-20.h5 /params)" ] ||
    fail "SDK $version: the swish layer plugin in model.layers trained differently from swish_mlp"

  head -c 60000 "$FORTUNES/cookie" >train-$version.txt
  "$MGTRAIN" data convert --text train-$version.txt --out text-$version.h5 >convert.log 2>&1 || { cat convert.log; fail "convert"; }
  run_np 2 300 train --config "$EXAMPLES/text_gpt_layers.ini" --plugin-path "$dir" --data.train="$WORK/text-$version.h5" \
    --data.test="$WORK/text-$version.h5" --checkpoint.dir="$WORK/rope-$version" --model.input_shape=16 \
    "--model.layers=embed 256 32, rope, residual { layernorm, linear 96, attention 2 causal, linear 32 }, layernorm, tied_head" \
    --train.max_steps=8 --train.global_batch=8 --train.warmup_steps=2 --train.log_every=4 --json >rope-$version.log 2>&1 ||
    { cat rope-$version.log; fail "SDK $version's rope layer plugin did not train"; }
  grep -q '"final_loss"' rope-$version.log || { cat rope-$version.log; fail "SDK $version's rope run gave no result"; }
  echo "SDK $version: plugins usable; trained (loss $first -> $final), resumed to the same bits, layer = model, rope trains"
done
[[ $versions -gt 0 ]] || fail "no kept SDK under tests/abi (scripts/snapshot_sdk.sh)"
echo PASS
