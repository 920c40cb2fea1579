#!/usr/bin/env bash
# A plugin's own layer on every executor: examples/plugin's swish_mlp (a Swish activation written
# over mgt::Ops, no CUDA), built out of tree against the installed SDK, trains at np=2 on the CPU
# (the loss goes down), through the GPU path's program on the CPU backend (the step in device
# memory, in_memory in lib.sh: the same losses and parameters within 1e-5) and in deterministic
# mode (the same parameter bits at np=1 and np=2), and exports as two ONNX operators. The
# example's optimizer, signsgd, states its update once (mgtrain/update_rule.hpp): in device memory
# the step applies it with the bits of in place.
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH

build_example_plugins libmgtrain-model-swish_mlp.so

write_config run.ini
common=(--config run.ini --plugin-path "$PLUGIN_BUILD/plugins" --model.name=swish_mlp --model.hidden=64,32
        --train.max_steps=60 --train.log_every=10 --json)
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }

for memory in host device; do
  in_memory $memory run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/$memory" >$memory.log 2>&1 ||
    { cat $memory.log; fail "swish_mlp with the step in $memory memory"; }
done
first=$(losses host/metrics.jsonl | head -1)
last=$(losses host/metrics.jsonl | tail -1)
echo "swish_mlp np=2 on the CPU: loss $first (step 10) -> $last (step 60)"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || { cat host.log; fail "the loss did not go down"; }
paste -d' ' <(losses host/metrics.jsonl) <(losses device/metrics.jsonl) |
  awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++ } END { exit !(n == 6 && bad == 0) }' ||
  { paste host/metrics.jsonl device/metrics.jsonl; fail "the step's losses in device memory differ from in place"; }
"$MGTRAIN" compare host/step-60.h5 device/step-60.h5 --rtol 1e-5 ||
  fail "the step's parameters in device memory differ from in place"

for np in 1 2; do
  run_np $np 300 train "${common[@]}" --sync.deterministic=true --checkpoint.dir="$WORK/det$np" >det$np.log 2>&1 ||
    { cat det$np.log; fail "swish_mlp deterministic at np=$np"; }
done
[ "$(group_hash det1/step-60.h5 /params)" = "$(group_hash det2/step-60.h5 /params)" ] ||
  fail "deterministic swish_mlp parameters differ between np=1 and np=2"
# Swish describes itself as two ONNX operators (LayerKind::onnx_nodes): the model exports.
"$MGTRAIN" export --checkpoint host/step-60.h5 --out swish.onnx --plugin-path "$PLUGIN_BUILD/plugins" >export.log 2>&1 ||
  { cat export.log; fail "export of swish_mlp"; }
[[ -s swish.onnx ]] || fail "export of swish_mlp wrote no file"
# The plugin's element update in device memory: the same parameters as in place (the layers'
# GEMMs are the same on both here).
sign=(--optimizer.name=signsgd --optimizer.lr=0.001 --optimizer.momentum=0.9 --model.name=mlp)
for memory in host device; do
  in_memory $memory run_np 2 300 train "${common[@]}" "${sign[@]}" --checkpoint.dir="$WORK/sign-$memory" \
    >sign-$memory.log 2>&1 || { cat sign-$memory.log; fail "signsgd with the step in $memory memory"; }
done
"$MGTRAIN" compare sign-host/step-60.h5 sign-device/step-60.h5 --rtol 1e-5 ||
  fail "signsgd's update in device memory differs from in place"
echo "PASS"
