#!/usr/bin/env bash
# What a plugin author writes first, on every CPU rank's step at np=2 under mpirun: a model that is
# not a stack of layers (tests/plugins/residual_mlp.cpp: SDK layers driven by hand, a skip
# connection) and an optimizer with no element update (tests/plugins/plain_sgd.cpp: its own
# step() on the host). Both train; plain_sgd gives sgd's parameters (no momentum) bit for bit; and
# the step in device memory (the GPU's form, in_memory in lib.sh), which cannot run them, falls
# back to running them in place. An optimizer with an element update trains by it alone, whatever
# its step() does, under every strategy; one that reads a key it never declared is told so, a layer
# that keeps forward state is right in deterministic mode with or without row_wise(), and checked
# mode (MGTRAIN_CHECKED=1) names a layer that writes past its output.
source "$(dirname "$0")/lib.sh"
: "${TEST_PLUGIN_DIR:?}"
write_config run.ini
common=(--config run.ini --plugin-path "$TEST_PLUGIN_DIR/hand-written" --train.max_steps=60 --train.log_every=10)
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }

for memory in host device; do
  in_memory $memory run_np 2 300 train "${common[@]}" --model.name=residual_mlp --optimizer.name=plain_sgd \
    --optimizer.lr=0.05 --checkpoint.dir="$WORK/residual-$memory" >residual-$memory.log 2>&1 ||
    { cat residual-$memory.log; fail "residual_mlp with plain_sgd, the step in $memory memory"; }
done
first=$(losses residual-host/metrics.jsonl | head -1)
last=$(losses residual-host/metrics.jsonl | tail -1)
echo "residual_mlp with plain_sgd at np=2: loss $first (step 10) -> $last (step 60)"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || { cat residual-host.log; fail "the loss did not go down"; }
! grep -q "^device:" residual-device.log || { cat residual-device.log; fail "the step in device memory ran a model it cannot"; }
[ "$(group_hash residual-host/step-60.h5 /params)" = "$(group_hash residual-device/step-60.h5 /params)" ] ||
  fail "the fallback to the step in place trained differently"

# The optimizer's own step() against sgd's element update: the same rule, the same bits.
for optimizer in plain_sgd sgd; do
  run_np 2 300 train "${common[@]}" --optimizer.name=$optimizer --optimizer.momentum=0 \
    --checkpoint.dir="$WORK/$optimizer" >$optimizer.log 2>&1 || { cat $optimizer.log; fail "mlp with $optimizer"; }
done
[ "$(group_hash plain_sgd/step-60.h5 /params)" = "$(group_hash sgd/step-60.h5 /params)" ] ||
  fail "plain_sgd's step() and sgd's element update gave different parameters"

# An optimizer with an element update is updated by it alone, whatever its step() does: a step()
# that forgets the weight decay (`other`) or throws trains the bits of the SDK's own step()
# (`inherited`) under allreduce, zero and param_server, in place and in device memory. allreduce
# at np=1 and param_server with one worker (np=2) train the same global batch, as do zero and
# allreduce at np=2, so each pair gives one set of bits.
two() {  # two NAME NP FORM [args...]: trains two_updates 10 steps, prints the SHA-256 of /params
  local name=$1 np=$2 form=$3; shift 3
  run_np "$np" 300 train "${common[@]}" --optimizer.name=two_updates --optimizer.step_form="$form" \
    --train.max_steps=10 --checkpoint.dir="$WORK/$name" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "two_updates, $name: step_form = $form did not train"; }
  group_hash "$name/step-10.h5" /params
}
np1=$(two two-inherited-np1 1 inherited --sync.name=allreduce)
np2=$(two two-inherited-np2 2 inherited --sync.name=allreduce)
# `other`'s loop is the element update without the weight decay: were it run, the bits would differ.
[ "$(two two-no-decay 1 inherited --sync.name=allreduce --optimizer.weight_decay=0)" != "$np1" ] ||
  fail "two_updates: the weight decay changed no bit, so step_form = other cannot be told apart"
for form in other throws; do
  [ "$(two two-$form-allreduce 1 $form --sync.name=allreduce)" = "$np1" ] ||
    fail "allreduce, step_form = $form: not the element update's bits"
  [ "$(in_memory device two two-$form-device 1 $form --sync.name=allreduce)" = "$np1" ] ||
    fail "allreduce in device memory, step_form = $form: not the element update's bits"
  [ "$(two two-$form-param_server 2 $form --sync.name=param_server --sync.staleness=0)" = "$np1" ] ||
    fail "param_server, step_form = $form: not the element update's bits (those of allreduce at np=1)"
  [ "$(two two-$form-zero 2 $form --sync.name=zero)" = "$np2" ] ||
    fail "zero, step_form = $form: not the element update's bits (those of allreduce at np=2)"
done
echo "an optimizer with an element update trains by it alone, whatever its step(), under allreduce, zero and param_server"

# A layer that keeps forward state in its planned memory is right in deterministic mode whether it
# declares row_wise() (one pass for the micro-shards) or not (one shard at a time, its planned
# memory kept per shard): the same bits at np=1 and np=2, and the same as the declared form.
for form in true false; do
  for np in 1 2; do
    run_np $np 300 train "${common[@]}" --model.name=stateful_mlp --model.row_wise=$form --sync.deterministic=true \
      --train.max_steps=20 --checkpoint.dir="$WORK/stateful-$form-$np" >stateful.log 2>&1 ||
      { cat stateful.log; fail "stateful_mlp, row_wise $form, np=$np"; }
  done
done
reference=$(group_hash stateful-true-1/step-20.h5 /params)
for run in stateful-true-2 stateful-false-1 stateful-false-2; do
  [ "$(group_hash $run/step-20.h5 /params)" = "$reference" ] ||
    fail "deterministic: a layer keeping forward state, $run, differs from the row-wise form at np=1"
done
echo "a layer keeping forward state: the same bits declared row-wise or not, at np=1 and np=2"

# A layer that writes past its output: checked mode names it, the layer and the memory, on the
# first step, on every rank's path (in place, and the GPU path's program on the CPU).
for device in cpu emulated_gpu; do
  MGTRAIN_CHECKED=1 run_np 2 120 train "${common[@]}" --model.name=overrun_mlp --train.device=$device \
    --checkpoint.dir="$WORK/overrun" >overrun.log 2>&1 && { cat overrun.log; fail "a layer writing past its output trained"; }
  # Each rank finds it in its own step: one line per rank, each naming the layer.
  grep -F "checked mode (MGTRAIN_CHECKED=1): layer 'overrun1' wrote past the memory it was given, in forward: the output of layer 'overrun1' [" overrun.log |
    grep -qE "bytes 0\.\.31 after its end changed" ||
    { cat overrun.log; fail "checked mode on $device did not name the layer writing past its output and how far"; }
  ! grep "^mgtrain: error:" overrun.log | grep -qv "layer 'overrun1' wrote past" ||
    { cat overrun.log; fail "checked mode on $device: another error than the layer's"; }
  no_ranks_left
done
# Nothing to find in a correct model: the SDK's layers under checked mode.
MGTRAIN_CHECKED=1 run_np 2 120 train "${common[@]}" --model.name=overrun_mlp --model.overrun=0 --train.max_steps=5 \
  --checkpoint.dir="$WORK/no-overrun" >no-overrun.log 2>&1 || { cat no-overrun.log; fail "checked mode refused a correct layer"; }

# A key the plugin reads but never declared: the error names the plugin and says so, also when a
# value was given for the key (which is dropped, with a note, as no chosen plugin's).
for given in "" --optimizer.eps=1e-8; do
  run_np 2 120 train "${common[@]}" --optimizer.name=undeclared_key $given --checkpoint.dir="$WORK/undeclared" \
    >undeclared.log 2>&1 && { cat undeclared.log; fail "a plugin reading an undeclared key trained"; }
  one_error_line undeclared.log | grep -qF "config key 'optimizer.eps' is read by optimizer plugin 'undeclared_key', which does not declare it" ||
    { cat undeclared.log; fail "reading an undeclared key ${given:-(no value given)}: unclear error"; }
  no_ranks_left
done
echo "PASS"
