#!/usr/bin/env bash
# model.init_from: a new run starting from another run's parameters, under mpirun on the real
# Fashion-MNIST (and fortunes for the gpt). Usage: init_from.sh CASE
#   report       an mlp of another second hidden size, of one hidden layer, and one of 5 classes on
#                a 5-class task derived from Fashion-MNIST: the loaded / new / left-out lines (shapes
#                named), once, before step 1; the checkpoints record the source's path and SHA-256
#   bits         loaded parameters hold the source's bits and new ones the from-scratch run's (one
#                step at a learning rate of 1e-37, which moves no weight of these magnitudes)
#   world_sizes  a deterministic fine-tune gives the same parameter bits at np=1, 2, 4, with
#                grad_accum and with zero
#   sync         every sync strategy, and the step in device memory (the GPU's form), starts from
#                the loaded bits on every rank (zero gathers them, param_server's servers hold them)
#   resume       --resume wins, in one line, without the source; stopped and resumed, the
#                fine-tune gives the straight one's bits and keeps its provenance
#   refused      missing, a directory without `latest`, truncated, corrupt (checksum), not a
#                checkpoint, unrelated (no parameter matches), an older format without checksums
#                (read with --allow-unchecked), the source in the checkpoint.dir that
#                checkpoint.overwrite empties: one line each, before step 1, no rank left
#   models       a cnn's checkpoint into a `layers` model of 5 classes; a resnet with its batch norm
#                buffers into a resnet of 5 classes
#   gpt          a gpt continuing pre-training from a gpt checkpoint starts at a lower loss
source "$(dirname "$0")/lib.sh"
case=$1
raw=/usr/share/datasets/fashion-mnist
write_config run.ini "[model]" "hidden = 128,64" "[train]" "max_steps = 20" "log_every = 10" "progress = lines"

# The source run: an mlp of 128 and 64 hidden units and 10 classes, 20 steps.
source_run() {
  run_np 2 120 train --config run.ini --checkpoint.dir="$WORK/src" "$@" >src.log 2>&1 ||
    { cat src.log; fail "the source run"; }
}
# A task derived from Fashion-MNIST: the classes FIRST..LAST (labels lowered by SHIFT), at most
# LIMIT training samples, as NAME_train.h5 and NAME_test.h5. Usage: derived_task NAME FIRST LAST LIMIT SHIFT
derived_task() {
  local name=$1 split
  for split in train:train t10k:test; do
    local limit=$4
    [ "${split#*:}" = train ] || limit=0
    python3 "$(dirname "$0")/idx_subset.py" "$raw/${split%%:*}-images-idx3-ubyte.gz" \
      "$raw/${split%%:*}-labels-idx1-ubyte.gz" "$name-${split#*:}" "$2" "$3" "$limit" "$5"
    "$MGTRAIN" data convert --images "$name-${split#*:}-images.idx" --labels "$name-${split#*:}-labels.idx" \
      --out "${name}_${split#*:}.h5" >convert.log 2>&1 || { cat convert.log; fail "data convert $name"; }
  done
}
five=(--data.train="$WORK/five_train.h5" --data.test="$WORK/five_test.h5" --model.classes=5)
root_attr() {  # root_attr FILE NAME
  "$(h5py_python)" -c "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs[sys.argv[2]])" "$1" "$2"
}
# The checkpoint records where its run's parameters came from.
provenance() {  # provenance CHECKPOINT SOURCE
  [ "$(root_attr "$1" init_from)" = "$2" ] || fail "$1: init_from = '$(root_attr "$1" init_from)', expected '$2'"
  [ "$(root_attr "$1" init_from_sha256)" = "$(sha256sum <"$2" | cut -c1-64)" ] ||
    fail "$1: init_from_sha256 is not the SHA-256 of $2"
}
has_line() {  # has_line LOG TEXT: exactly once
  [ "$(grep -cF -- "$2" "$1")" = 1 ] || { cat "$1"; fail "$1: expected once: $2"; }
}
refused() {  # refused LOG EXPECTED...: non-zero exit ($rc), one error line holding each, no step taken
  local log=$1 line; shift
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$log"; fail "exit $rc, expected a refusal"; }
  line=$(one_error_line "$log")
  for part in "$@"; do [[ $line == *"$part"* ]] || fail "the error line does not say '$part'"; done
  ! grep -q '^training \|^epoch [0-9]*/[0-9]* step ' "$log" || { cat "$log"; fail "the refused run trained"; }
  no_ranks_left
}
tiny_lr=(--optimizer.lr=1e-37 --optimizer.momentum=0)

case $case in
report)
  source_run
  src=$WORK/src/step-20.h5
  sha=$(sha256sum <"$src" | cut -c1-64)
  # The run directory, as eval --checkpoint takes it.
  run_np 2 120 train --config run.ini --model.hidden=128,32 --model.init_from="$WORK/src" \
    --checkpoint.dir="$WORK/hidden" >hidden.log 2>&1 || { cat hidden.log; fail "the fine-tune of hidden 128,32"; }
  p="model.init_from '$WORK/src': "
  has_line hidden.log "${p}step 20 of its run, sha256 $sha: 3 of this model's 6 parameter(s) loaded, 3 new (from train.seed), 3 of the checkpoint's left out"
  has_line hidden.log "${p}loaded fc1.weight, fc1.bias, fc3.bias"
  has_line hidden.log "${p}new fc2.weight, fc2.bias, fc3.weight"
  has_line hidden.log "${p}left out fc2.weight: the checkpoint's [64, 128], this model's [32, 128]"
  has_line hidden.log "${p}left out fc2.bias: the checkpoint's [64], this model's [32]"
  has_line hidden.log "${p}left out fc3.weight: the checkpoint's [10, 64], this model's [10, 32]"
  # Once, and before step 1's figures.
  first_step=$(grep -n '^epoch [0-9]*/[0-9]* step ' hidden.log | head -1 | cut -d: -f1)
  report=$(grep -nF "${p}loaded" hidden.log | cut -d: -f1)
  [ -n "$first_step" ] && [ "$report" -lt "$first_step" ] || { cat hidden.log; fail "the report is not before step 1"; }
  provenance hidden/step-20.h5 "$src"
  # One hidden layer: the checkpoint's third layer is not in the model.
  run_np 2 120 train --config run.ini --model.hidden=128 --train.max_steps=1 --model.init_from="$src" \
    --checkpoint.dir="$WORK/shallow" >shallow.log 2>&1 || { cat shallow.log; fail "the fine-tune of hidden 128"; }
  has_line shallow.log "model.init_from '$src': left out, not in this model: fc3.bias, fc3.weight"
  has_line shallow.log "2 of this model's 4 parameter(s) loaded, 2 new (from train.seed), 4 of the checkpoint's left out"

  derived_task five 0 4 0 0
  run_np 2 120 train --config run.ini "${five[@]}" --model.init_from="$src" --checkpoint.dir="$WORK/classes" \
    >classes.log 2>&1 || { cat classes.log; fail "the fine-tune of 5 classes"; }
  p="model.init_from '$src': "
  has_line classes.log "${p}step 20 of its run, sha256 $sha: 4 of this model's 6 parameter(s) loaded"
  has_line classes.log "${p}left out fc3.weight: the checkpoint's [10, 64], this model's [5, 64]"
  has_line classes.log "${p}left out fc3.bias: the checkpoint's [10], this model's [5]"
  has_line classes.log "${p}new fc3.weight, fc3.bias"
  provenance classes/step-20.h5 "$src"
  echo "init_from: loaded, new and left-out lines for hidden 128,32 and for 5 classes"
  ;;
bits)
  source_run
  src=$WORK/src/step-20.h5
  derived_task five 0 4 0 0
  run_np 2 120 train --config run.ini "${five[@]}" "${tiny_lr[@]}" --train.max_steps=1 --model.init_from="$src" \
    --checkpoint.dir="$WORK/tuned" >tuned.log 2>&1 || { cat tuned.log; fail "the fine-tune"; }
  run_np 2 120 train --config run.ini "${five[@]}" "${tiny_lr[@]}" --train.max_steps=1 \
    --checkpoint.dir="$WORK/scratch" >scratch.log 2>&1 || { cat scratch.log; fail "the run from scratch"; }
  "$(h5py_python)" - "$src" tuned/step-1.h5 scratch/step-1.h5 <<'PY' || fail "the parameters' bits"
import sys, h5py, numpy as np
src, tuned, scratch = (h5py.File(p, "r")["params"] for p in sys.argv[1:])
def same(a, b): return a.shape == b.shape and a[()].tobytes() == b[()].tobytes()
# Loaded: the source's bits, which differ from the seed's (or this would prove nothing).
for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
    assert same(tuned[name], src[name]), name + " is not the source's"
    assert not same(scratch[name], src[name]), name + ": the source's and the seed's are the same"
# New (another shape): the from-scratch run's bits; a zero-initialised bias stays below 1e-30.
assert same(tuned["fc3.weight"], scratch["fc3.weight"]), "fc3.weight is not the seed's"
assert np.abs(tuned["fc3.bias"][()]).max() < 1e-30 and np.abs(scratch["fc3.bias"][()]).max() < 1e-30
print("loaded bits = source's, new bits = from scratch")
PY
  ;;
world_sizes)
  source_run
  derived_task five 0 4 0 0
  det=(--config run.ini "${five[@]}" --train.max_steps=10 --sync.deterministic=true --model.init_from="$WORK/src/latest")
  for np in 1 2 4; do
    run_np $np 180 train "${det[@]}" --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 || { cat np$np.log; fail "np=$np"; }
  done
  run_np 2 180 train "${det[@]}" --sync.name=grad_accum --sync.accum_steps=4 --checkpoint.dir="$WORK/accum" \
    >accum.log 2>&1 || { cat accum.log; fail "grad_accum"; }
  run_np 2 180 train "${det[@]}" --sync.name=zero --checkpoint.dir="$WORK/zero" >zero.log 2>&1 ||
    { cat zero.log; fail "zero"; }
  for run in np2 np4 accum zero; do
    "$MGTRAIN" compare --params-only np1/step-10.h5 $run/step-10.h5 >compare_$run.log 2>&1 ||
      { cat compare_$run.log; fail "$run's parameters differ from np=1's"; }
  done
  # It trained: the result is not the source's, nor a from-scratch run's.
  ! "$MGTRAIN" compare --params-only np1/step-10.h5 src/step-20.h5 >/dev/null 2>&1 || fail "nothing trained"
  echo "deterministic fine-tune: the same parameter bits at np=1, 2, 4, with grad_accum and zero"
  ;;
sync)
  source_run
  src=$WORK/src/step-20.h5
  for strategy in allreduce grad_accum zero param_server device; do
    args=(--config run.ini "${tiny_lr[@]}" --train.max_steps=2 --model.init_from="$src" --checkpoint.dir="$WORK/$strategy")
    np=2
    case $strategy in
    grad_accum) args+=(--sync.name=grad_accum --sync.accum_steps=2) ;;
    zero) args+=(--sync.name=zero) ;;
    param_server) args+=(--sync.name=param_server) && np=3 ;;
    esac
    memory=host
    [ $strategy = device ] && memory=device
    in_memory $memory run_np $np 180 train "${args[@]}" >$strategy.log 2>&1 || { cat $strategy.log; fail "$strategy"; }
    has_line $strategy.log "model.init_from '$src': step 20 of its run"
    "$MGTRAIN" compare --params-only "$src" "$WORK/$strategy" >compare_$strategy.log 2>&1 ||
      { cat compare_$strategy.log; fail "$strategy: the parameters are not the loaded ones"; }
    provenance "$(cd $strategy && echo "$PWD/$(cat latest)")" "$src"
  done
  echo "init_from: the loaded bits with allreduce, grad_accum, zero, param_server and the step in device memory"
  ;;
resume)
  source_run
  src=$WORK/src/step-20.h5
  tune=(--config run.ini --model.init_from="$src" --model.hidden=128,32 --checkpoint.every_steps=10)
  run_np 2 120 train "${tune[@]}" --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
    { cat straight.log; fail "the straight fine-tune"; }
  run_np 2 120 train "${tune[@]}" --train.max_steps=10 --checkpoint.dir="$WORK/stopped" >first.log 2>&1 ||
    { cat first.log; fail "the fine-tune's first part"; }
  # The source is not read again: a resumed fine-tune needs only its own checkpoints.
  mv src src.away
  run_np 2 120 train "${tune[@]}" --checkpoint.dir="$WORK/stopped" --resume latest >resumed.log 2>&1 ||
    { cat resumed.log; fail "the resumed fine-tune"; }
  mv src.away src
  has_line resumed.log "model.init_from '$src' not applied: --resume continues this run from its own parameters"
  ! grep -q "model.init_from '$src': " resumed.log || fail "the resumed run loaded model.init_from"
  "$MGTRAIN" compare straight/step-20.h5 stopped/step-20.h5 || fail "stopped and resumed differs from straight"
  provenance stopped/step-20.h5 "$src"
  ;;
refused)
  source_run
  src=$WORK/src/step-20.h5
  mkdir empty
  head -c 20000 "$src" >truncated.h5
  cp "$src" corrupt.h5
  "$(h5py_python)" "$(dirname "$0")/h5edit.py" corrupt.h5 setfloat /params/fc1.weight 0 0.5 keep-crc ||
    fail "h5edit corrupt.h5"
  cp "$src" old.h5
  for attr in attributes_crc32 global_batch samples_in_epoch; do
    "$(h5py_python)" "$(dirname "$0")/h5edit.py" old.h5 delattr / $attr || fail "h5edit old.h5"
  done
  "$(h5py_python)" "$(dirname "$0")/h5edit.py" old.h5 delattr /optimizer attributes_crc32 || fail "h5edit old.h5"
  "$(h5py_python)" "$(dirname "$0")/h5edit.py" old.h5 setint / format_version 1 || fail "h5edit old.h5"
  for bad in missing empty_dir truncated corrupt data_file unrelated old_format; do
    extra=()
    case $bad in
    missing) from=$WORK/missing.h5 expect=("model.init_from: checkpoint '$WORK/missing.h5'" "does not exist") ;;
    empty_dir) from=$WORK/empty expect=("model.init_from: checkpoint '$WORK/empty' is a directory with no 'latest'") ;;
    truncated) from=$WORK/truncated.h5 expect=("model.init_from: checkpoint '$WORK/truncated.h5'" "HDF5") ;;
    corrupt)
      from=$WORK/corrupt.h5
      expect=("model.init_from: checkpoint '$WORK/corrupt.h5': dataset '/params/fc1.weight' checksum mismatch")
      ;;
    data_file)
      from=$DATA_DIR/test.h5
      expect=("model.init_from: checkpoint '$DATA_DIR/test.h5'" "no attribute 'format_version'")
      ;;
    unrelated)
      from=$src expect=("model.init_from '$src': no parameter matches this model by name and shape"
        "the checkpoint's 6: fc1.bias [128], fc1.weight [128, 784]" "refused rather than training from the seed")
      extra=(--model.name=resnet --model.depth=8 --model.width=8)
      ;;
    old_format)
      from=$WORK/old.h5
      expect=("model.init_from: checkpoint '$WORK/old.h5' has format_version 1 without attribute checksums"
        "--allow-unchecked")
      ;;
    esac
    rc=0
    run_np 2 120 train --config run.ini --model.init_from="$from" "${extra[@]}" --checkpoint.dir="$WORK/$bad" \
      >$bad.log 2>&1 || rc=$?
    refused $bad.log "${expect[@]}"
  done
  # Its own source, in the checkpoint.dir that checkpoint.overwrite would empty.
  rc=0
  run_np 2 120 train --config run.ini --model.init_from="$WORK/src" --checkpoint.dir="$WORK/src" \
    --checkpoint.overwrite=true >own_dir.log 2>&1 || rc=$?
  refused own_dir.log "model.init_from '$WORK/src': '$src' is one of the checkpoints of checkpoint.dir '$WORK/src'"
  [ -f "$src" ] || fail "the source checkpoint was removed"
  # Asked for explicitly, the older format is read.
  run_np 2 120 train --config run.ini --model.init_from="$WORK/old.h5" --allow-unchecked --checkpoint.dir="$WORK/old" \
    >allowed.log 2>&1 || { cat allowed.log; fail "--allow-unchecked"; }
  has_line allowed.log "model.init_from '$WORK/old.h5': step 20 of its run"
  echo "init_from: every bad checkpoint refused in one line before step 1"
  ;;
models)
  derived_task five 0 4 0 0
  write_config run.ini "[train]" "max_steps = 5" "log_every = 10" "progress = lines"
  run_np 2 120 train --config run.ini --model.name=cnn --train.max_steps=5 --checkpoint.dir="$WORK/cnn" \
    >cnn.log 2>&1 || { cat cnn.log; fail "the cnn source"; }
  layers="conv 32 k3 p1, relu, maxpool 2, conv 64 k3 p1, relu, maxpool 2, flatten, linear 128, relu, linear 5"
  run_np 2 120 train --config run.ini "${five[@]}" --model.name=layers --model.layers="$layers" --train.max_steps=5 \
    --model.init_from="$WORK/cnn" --checkpoint.dir="$WORK/layers" >layers.log 2>&1 || { cat layers.log; fail "layers"; }
  p="model.init_from '$WORK/cnn': "
  has_line layers.log "${p}step 5 of its run"
  has_line layers.log "6 of this model's 8 parameter(s) loaded"
  has_line layers.log "${p}left out fc2.weight: the checkpoint's [10, 128], this model's [5, 128]"
  resnet=(--config run.ini --model.name=resnet --model.depth=8 --model.width=8 --train.max_steps=5)
  run_np 2 120 train "${resnet[@]}" --checkpoint.dir="$WORK/resnet" >resnet.log 2>&1 ||
    { cat resnet.log; fail "the resnet source"; }
  run_np 2 120 train "${resnet[@]}" "${five[@]}" --model.init_from="$WORK/resnet" --checkpoint.dir="$WORK/resnet5" \
    >resnet5.log 2>&1 || { cat resnet5.log; fail "the resnet of 5 classes"; }
  grep -F "model.init_from '$WORK/resnet': step 5 of its run" resnet5.log | grep -q "buffers: [1-9][0-9]* loaded, 0 new" ||
    { cat resnet5.log; fail "the resnet's buffers were not loaded"; }
  grep -q "model.init_from '$WORK/resnet': left out fc.weight: the checkpoint's \[10, " resnet5.log ||
    { cat resnet5.log; fail "the resnet's classifier was not left out"; }
  echo "init_from: cnn into layers, resnet into resnet of 5 classes"
  ;;
gpt)
  require_fortunes
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out text.h5 >convert.log 2>&1 ||
    { cat convert.log; fail "data convert --text"; }
  cat >gpt.ini <<INI
[data]
train = $WORK/text.h5
[model]
name = gpt
layers = 2
heads = 2
dim = 32
context = 32
[optimizer]
name = adam
lr = 0.002
[train]
max_steps = 30
global_batch = 16
seed = 11
log_every = 10
progress = lines
[checkpoint]
dir = $WORK/pre
INI
  run_np 2 300 train --config gpt.ini >pre.log 2>&1 || { cat pre.log; fail "the gpt pre-training"; }
  run_np 2 300 train --config gpt.ini --model.init_from="$WORK/pre" --train.seed=12 --checkpoint.dir="$WORK/more" \
    >more.log 2>&1 || { cat more.log; fail "the gpt continuing"; }
  n=$(h5ls pre/step-30.h5/params | wc -l)
  has_line more.log "model.init_from '$WORK/pre': step 30 of its run"
  has_line more.log "$n of this model's $n parameter(s) loaded, 0 new (from train.seed), 0 of the checkpoint's left out"
  provenance more/step-30.h5 "$WORK/pre/step-30.h5"
  first() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1" | head -1; }
  a=$(first pre/metrics.jsonl) b=$(first more/metrics.jsonl)
  echo "gpt: loss at step 10 from scratch $a, continuing from step 30 $b"
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' || fail "continuing did not start lower"
  ;;
*) fail "unknown case $case" ;;
esac
