#!/usr/bin/env bash
# A layer plugin by name in the config-declared `layers` model, as a plugin author ships one:
# examples/plugin's swish (libmgtrain-layer-swish.so, built out of tree against the installed
# SDK) in `model.layers = flatten, linear 64, swish, linear 10` trains at np=2 to the parameters
# of swish_mlp (the same layer in a model plugin of its own) bit for bit, runs through the GPU
# path's program on the CPU backend (train.device = emulated_gpu, in the installed build), keeps deterministic mode's bits at np=1 and np=2, is listed by
# `mgtrain plugins`, evaluates from its checkpoint with the plugin found by name in the --plugin-path, and
# exports (Swish describes itself as two ONNX operators), and each mistake gets one line: an
# unknown kind names the file it looked for, a bad argument the entry and the plugin's words.
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH

build_example_plugins libmgtrain-layer-swish.so
write_config run.ini
plugins=(--plugin-path "$PLUGIN_BUILD/plugins")
common=(--config run.ini "${plugins[@]}" --train.max_steps=40 --train.log_every=10)
list=(--model.name=layers "--model.layers=flatten, linear 64, swish, linear 10")

run_np 2 300 train "${common[@]}" "${list[@]}" --checkpoint.dir="$WORK/list" --json >list.log 2>&1 ||
  { cat list.log; fail "the layers model with the swish layer plugin"; }
run_np 2 300 train "${common[@]}" --model.name=swish_mlp --model.hidden=64 --checkpoint.dir="$WORK/model" \
  >model.log 2>&1 || { cat model.log; fail "swish_mlp"; }
[ "$(group_hash list/step-40.h5 /params)" = "$(group_hash model/step-40.h5 /params)" ] ||
  fail "the swish layer plugin in model.layers trained differently from swish_mlp's own swish"
echo "model.layers with the swish layer plugin: swish_mlp's parameters bit for bit"

# The GPU path's program on the CPU, as a plugin author checks it without a GPU, in the installed build.
run_np 2 300 train "${common[@]}" "${list[@]}" --train.device=emulated_gpu --checkpoint.dir="$WORK/device" \
  >device.log 2>&1 || { cat device.log; fail "the swish layer plugin with train.device = emulated_gpu"; }
grep -q "^device: cpu (the CPU backend, in memory of the step's own: the GPU path's program" device.log ||
  { cat device.log; fail "train.device = emulated_gpu did not run the GPU path's program"; }
"$MGTRAIN" compare list/step-40.h5 device/step-40.h5 --rtol 1e-5 ||
  fail "the swish layer plugin: the step in device memory differs from in place"

for np in 1 2; do
  run_np $np 300 train "${common[@]}" "${list[@]}" --sync.deterministic=true --checkpoint.dir="$WORK/det$np" \
    >det$np.log 2>&1 || { cat det$np.log; fail "deterministic at np=$np"; }
done
[ "$(group_hash det1/step-40.h5 /params)" = "$(group_hash det2/step-40.h5 /params)" ] ||
  fail "deterministic: the swish layer plugin's parameters differ between np=1 and np=2"

"$MGTRAIN" plugins "${plugins[@]}" >plugins.txt 2>&1 || { cat plugins.txt; fail "mgtrain plugins"; }
grep -qE "^layer +swish +1\.0\.0 " plugins.txt ||
  { cat plugins.txt; fail "mgtrain plugins does not list the layer plugin"; }
# eval finds the checkpoint's layer plugin by name in the search path.
"$MGTRAIN" eval --checkpoint list/step-40.h5 --data "$DATA_DIR/test.h5" "${plugins[@]}" >eval.log 2>&1 ||
  { cat eval.log; fail "eval of a checkpoint with a layer plugin"; }

expect_error() {  # expect_error PATTERN ARGS...: exit non-zero with one error line matching PATTERN
  local pattern=$1; shift
  "$MGTRAIN" "$@" >err.log 2>&1 && { cat err.log; fail "accepted: $*"; }
  one_error_line err.log | grep -qE "$pattern" || { cat err.log; fail "'$*': expected /$pattern/"; }
}
expect_error "entry 3 'swoosh': unknown layer 'swoosh'; expected one of .*, or a layer plugin of that name \(libmgtrain-layer-swoosh.so in the plugin path\)" \
  train "${common[@]}" --model.name=layers "--model.layers=flatten, linear 64, swoosh, linear 10" \
  --checkpoint.dir="$WORK/bad"
expect_error "entry 3 'swish 3' \(swish1\): swish takes no arguments, got '3'" \
  train "${common[@]}" --model.name=layers "--model.layers=flatten, linear 64, swish 3, linear 10" \
  --checkpoint.dir="$WORK/bad"
"$MGTRAIN" export --checkpoint list/step-40.h5 --out swish.onnx "${plugins[@]}" >export.log 2>&1 ||
  { cat export.log; fail "export of the layers model with the swish layer plugin"; }
[[ -s swish.onnx ]] || fail "export wrote no file"
echo "PASS"
