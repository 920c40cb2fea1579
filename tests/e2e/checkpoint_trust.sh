#!/usr/bin/env bash
# What a checkpoint directory and a checkpoint's contents may be trusted with. Usage:
# checkpoint_trust.sh CASE
#   overwrite_late  checkpoint.overwrite = true over another run's checkpoints, with a run that
#               fails (a file as metrics.tensorboard_dir, a directory as metrics.file, a NaN at step
#               5): the old checkpoints and `latest` stay; a run that writes its first checkpoint
#               removes them then
#   rollback    resuming from step-20 where step-30 and step-40 exist (by its path, or `latest`
#               moved back to it) is refused, naming them and the ways out; with
#               checkpoint.overwrite = true the newer ones go once step-25 is written, step-20 stays
#   checksums   a checkpoint whose attributes_crc32 is gone (root, /optimizer, /sync) with its
#               attributes edited, with /sync's strategy edited or /sync deleted, is refused naming
#               the file
#   compare     mgtrain compare verifies optimizer state (checksum, finite, present) and compares it;
#               --params-only compares the parameters alone
#   finished    resuming a finished run: nothing to train, the checkpoint resumed from, a null loss
#   downgraded  a forged step and parameter with the checksums dropped and format_version lowered to
#               1 (as written before checksums) is refused by eval, compare and --resume, naming
#               --allow-unchecked, which reads it
#   hollow      a parameter or sync array declaring 8 GiB with nothing stored is refused by compare
#               and --resume under a 2 GiB address-space limit, before anything is allocated
#   plugin_paths  a checkpoint whose recorded plugin path holds a library with a constructor: eval,
#               export and generate never load it (a checkpoint names plugins, not files)
#   out_of_memory  a model too large for a 2 GiB address-space limit, and compare of a checkpoint
#               larger than what is left: the out-of-host-memory line, never std::bad_alloc
source "$(dirname "$0")/lib.sh"
case=$1
write_config run.ini "[train]" "log_every = 10" "progress = lines" "[checkpoint]" "every_steps = 10" "keep = 0"
python=$(h5py_python)
h5edit() { "$python" "$(dirname "$0")/h5edit.py" "$@" || fail "h5edit.py $*"; }
# The names in DIR other than the metrics file, on one line.
listing() { ls "$1" | grep -v metrics | tr '\n' ' '; }
refused() {  # refused LOG EXPECTED...: a non-zero exit (in $rc), one error line holding each EXPECTED
  local log=$1; shift
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$log"; fail "exit $rc, expected a refusal"; }
  local line
  line=$(one_error_line "$log")
  for part in "$@"; do [[ $line == *"$part"* ]] || fail "the error line does not say '$part'"; done
}

case $case in
overwrite_late)
  run_np 2 120 train --config run.ini --train.max_steps=30 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  before=$(listing ckpt)
  echo "a file" >afile
  mkdir adir
  for bad in tensorboard_file metrics_dir nan; do
    args=(--config run.ini --train.max_steps=20 --checkpoint.overwrite=true)
    env=()
    case $bad in
    tensorboard_file) args+=(--metrics.tensorboard_dir="$WORK/afile") ;;
    metrics_dir) args+=(--metrics.file="$WORK/adir") ;;
    nan) env=(MGTRAIN_TEST_NAN_AT=0:5) ;;
    esac
    rc=0
    env "${env[@]}" timeout --kill-after=10 120 mpirun -np 2 --oversubscribe "$MGTRAIN" train "${args[@]}" \
      >$bad.log 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat $bad.log; fail "$bad: exit $rc"; }
    grep "mgtrain: error:" $bad.log | head -1
    [ "$(listing ckpt)" = "$before" ] || { cat $bad.log; fail "$bad: the checkpoints are now: $(listing ckpt)"; }
    [ "$(cat ckpt/latest)" = step-30.h5 ] || fail "$bad: latest names $(cat ckpt/latest)"
  done
  run_np 2 120 train --config run.ini --train.max_steps=10 --checkpoint.overwrite=true >over.log 2>&1 ||
    { cat over.log; fail "checkpoint.overwrite = true"; }
  grep -q "removed 2 checkpoint(s) of an earlier run" over.log || { cat over.log; fail "no note of the removal"; }
  [ "$(listing ckpt)" = "latest step-10.h5 " ] || fail "left: $(listing ckpt)"
  ;;
rollback)
  run_np 2 120 train --config run.ini --train.max_steps=40 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  before=$(listing ckpt)
  rc=0
  run_np 2 120 train --config run.ini --resume "$WORK/ckpt/step-20.h5" --optimizer.lr=0.5 --train.max_steps=25 \
    >back.log 2>&1 || rc=$?
  refused back.log "checkpoint.dir '$WORK/ckpt'" "newer than '$WORK/ckpt/step-20.h5'" "'$WORK/ckpt/step-40.h5'" \
    "'$WORK/ckpt/step-30.h5'" "--resume latest" "--checkpoint.overwrite=true" "another checkpoint.dir"
  ! grep -q "^training " back.log || fail "the refused run trained"
  [ "$(listing ckpt)" = "$before" ] || fail "the refused run changed the directory: $(listing ckpt)"
  [ "$(cat ckpt/latest)" = step-40.h5 ] || fail "latest names $(cat ckpt/latest)"
  # `latest` moved back by hand rolls back the same way.
  echo step-20.h5 >ckpt/latest
  rc=0
  run_np 2 120 train --config run.ini --resume latest --train.max_steps=25 >latest.log 2>&1 || rc=$?
  refused latest.log "newer than '$WORK/ckpt/step-20.h5', which this run resumes from ('latest' names it)" \
    "'$WORK/ckpt/step-40.h5'" "--resume '$WORK/ckpt/step-40.h5' continues from the newest"
  echo step-40.h5 >ckpt/latest
  run_np 2 120 train --config run.ini --resume "$WORK/ckpt/step-20.h5" --optimizer.lr=0.5 --train.max_steps=25 \
    --checkpoint.overwrite=true >over.log 2>&1 || { cat over.log; fail "rolling back with checkpoint.overwrite"; }
  grep -q "removed 2 checkpoint(s) of an earlier run" over.log || { cat over.log; fail "no note of the removal"; }
  [ "$(listing ckpt)" = "latest step-10.h5 step-20.h5 step-25.h5 " ] || fail "left: $(listing ckpt)"
  [ "$(cat ckpt/latest)" = step-25.h5 ] || fail "latest names $(cat ckpt/latest)"
  ;;
checksums)
  run_np 2 120 train --config run.ini --train.max_steps=20 --optimizer.name=adam --optimizer.lr=0.001 \
    >adam.log 2>&1 || { cat adam.log; fail "the adam run"; }
  run_np 2 120 train --config run.ini --train.max_steps=20 --sync.wire=bf16 --checkpoint.dir="$WORK/bf16" \
    >bf16.log 2>&1 || { cat bf16.log; fail "the sync.wire = bf16 run"; }
  h5ls bf16/step-20.h5/sync | grep -q residual || fail "the bf16 checkpoint keeps no residuals"
  n=0
  for edit in root_step optimizer_steps sync_strategy sync_unchecked sync_deleted; do
    n=$((n + 1))
    case $edit in
    root_step)
      cp ckpt/step-20.h5 forged.h5
      h5edit forged.h5 delattr / attributes_crc32
      h5edit forged.h5 setint / step 1000000000000
      expect=("checkpoint '$WORK/forged.h5'" "the root group has no attribute 'attributes_crc32'" "format_version 2")
      extra=(--optimizer.name=adam --optimizer.lr=0.001)
      ;;
    optimizer_steps)
      cp ckpt/step-20.h5 forged.h5
      h5edit forged.h5 delattr /optimizer attributes_crc32
      h5edit forged.h5 setint /optimizer optimizer_steps 5
      expect=("checkpoint '$WORK/forged.h5'" "group '/optimizer' has no attribute 'attributes_crc32'")
      extra=(--optimizer.name=adam --optimizer.lr=0.001)
      ;;
    sync_strategy)
      cp bf16/step-20.h5 forged.h5
      h5edit forged.h5 setstr /sync strategy param_server
      expect=("checkpoint '$WORK/forged.h5'" "group '/sync'" "checksum mismatch")
      extra=(--sync.wire=bf16)
      ;;
    sync_unchecked)
      cp bf16/step-20.h5 forged.h5
      h5edit forged.h5 delattr /sync attributes_crc32
      h5edit forged.h5 setstr /sync strategy param_server
      expect=("checkpoint '$WORK/forged.h5'" "group '/sync' has no attribute 'attributes_crc32'")
      extra=(--sync.wire=bf16)
      ;;
    sync_deleted)
      cp bf16/step-20.h5 forged.h5
      h5edit forged.h5 unlink /sync
      expect=("checkpoint '$WORK/forged.h5'" "root attributes (" "names of its groups) checksum mismatch")
      extra=(--sync.wire=bf16)
      ;;
    esac
    rc=0
    run_np 2 120 train --config run.ini --train.max_steps=30 "${extra[@]}" --resume "$WORK/forged.h5" \
      --checkpoint.dir="$WORK/resumed$n" >$edit.log 2>&1 || rc=$?
    refused $edit.log "${expect[@]}"
    ! grep -q "^training " $edit.log || fail "$edit: the run trained from the edited checkpoint"
    # eval reads no optimizer state; what it reads it verifies as a resume does.
    [ $edit = optimizer_steps ] && continue
    rc=0
    "$MGTRAIN" eval --checkpoint "$WORK/forged.h5" --data "$DATA_DIR/test.h5" >eval_$edit.log 2>&1 || rc=$?
    refused eval_$edit.log "${expect[@]}"
  done
  ;;
compare)
  run_np 2 120 train --config run.ini --train.max_steps=20 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  param=$(h5ls ckpt/step-20.h5/params | awk 'NR == 1 { print $1 }')
  cp ckpt/step-20.h5 a.h5
  "$MGTRAIN" compare a.h5 ckpt/step-20.h5 >same.log 2>&1 || { cat same.log; fail "a copy does not match"; }
  grep -q "^optimizer/momentum/$param .*identical" same.log || { cat same.log; fail "no line for the momentum"; }
  for edit in inf damaged no_optimizer no_momentum changed; do
    cp ckpt/step-20.h5 b.h5
    case $edit in
    inf) h5edit b.h5 setfloat "/optimizer/momentum/$param" 3 inf ;;
    damaged) h5edit b.h5 setfloat "/optimizer/momentum/$param" 3 0.25 keep-crc ;;
    no_optimizer) h5edit b.h5 unlink /optimizer ;;
    no_momentum) h5edit b.h5 unlink /optimizer/momentum ;;
    changed) h5edit b.h5 setfloat "/optimizer/momentum/$param" 3 0.25 ;;
    esac
    rc=0
    "$MGTRAIN" compare a.h5 b.h5 >$edit.log 2>&1 || rc=$?
    echo "$edit: exit $rc, $(grep 'MATCH\|error' $edit.log)"
    case $edit in
    inf) refused $edit.log "checkpoint 'b.h5'" "/optimizer/momentum/$param" "non-finite value (inf at index 3" ;;
    damaged) refused $edit.log "checkpoint 'b.h5'" "/optimizer/momentum/$param" "checksum mismatch" ;;
    # The root's checksum covers the names of its groups.
    no_optimizer) refused $edit.log "checkpoint 'b.h5': root attributes (" "checksum mismatch" ;;
    no_momentum | changed)
      [ $rc -eq 1 ] && grep -q "^MISMATCH" $edit.log || { cat $edit.log; fail "$edit: not a mismatch"; }
      ;;
    esac
  done
  grep -q "^optimizer/momentum/$param .*DIFFERENT" changed.log || { cat changed.log; fail "no line names the difference"; }
  "$MGTRAIN" compare a.h5 b.h5 --params-only >params.log 2>&1 || { cat params.log; fail "--params-only"; }
  grep -q "^MATCH (bitwise, parameters only)" params.log || { cat params.log; fail "--params-only verdict"; }
  ;;
finished)
  run_np 2 120 train --config run.ini --train.max_steps=20 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  for max in 20 10; do
    run_np 2 120 train --config run.ini --train.max_steps=$max --resume latest >again$max.log 2>&1 ||
      { cat again$max.log; fail "resuming the finished run (max_steps $max)"; }
    ! grep -q "^training " again$max.log || { cat again$max.log; fail "max_steps $max: a training line"; }
    grep -q "^nothing to train: $WORK/ckpt/step-20.h5 is at step 20, and the run ends at step $max" again$max.log ||
      { cat again$max.log; fail "max_steps $max: no line says there is nothing to train"; }
    grep -q "^done: nothing to train at step 20, checkpoint $WORK/ckpt/step-20.h5$" again$max.log ||
      { cat again$max.log; fail "max_steps $max: the last line"; }
  done
  run_np 2 120 train --config run.ini --train.max_steps=20 --resume latest --json >json.log 2>&1 ||
    { cat json.log; fail "resuming the finished run with --json"; }
  line=$(tail -n 1 json.log)
  echo "$line"
  [[ $line == *'"final_loss":null,"checkpoint":"'"$WORK/ckpt/step-20.h5"'"'* ]] || fail "the JSON line"
  [ "$(listing ckpt)" = "latest step-10.h5 step-20.h5 " ] || fail "left: $(listing ckpt)"
  ;;
downgraded)
  run_np 2 120 train --config run.ini --train.max_steps=20 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  param=$(h5ls ckpt/step-20.h5/params | awk 'NR == 1 { print $1 }')
  cp ckpt/step-20.h5 forged.h5
  for attr in attributes_crc32 global_batch samples_in_epoch; do h5edit forged.h5 delattr / $attr; done
  h5edit forged.h5 delattr /optimizer attributes_crc32
  h5edit forged.h5 setint / format_version 1
  h5edit forged.h5 setint / step 1000
  h5edit forged.h5 setfloat "/params/$param" 0 0.5
  expect=("checkpoint '$WORK/forged.h5' has format_version 1 without attribute checksums"
          "cannot be verified; refused (--allow-unchecked reads it anyway)")
  rc=0
  "$MGTRAIN" eval --checkpoint "$WORK/forged.h5" --data "$DATA_DIR/test.h5" >eval.log 2>&1 || rc=$?
  refused eval.log "${expect[@]}"
  rc=0
  "$MGTRAIN" compare "$WORK/forged.h5" "$WORK/forged.h5" >compare.log 2>&1 || rc=$?
  refused compare.log "${expect[@]}"
  ! grep -q "^MATCH" compare.log || fail "compare printed MATCH for the forged checkpoint"
  rc=0
  run_np 2 120 train --config run.ini --train.max_steps=1010 --resume "$WORK/forged.h5" \
    --checkpoint.dir="$WORK/resumed" >resume.log 2>&1 || rc=$?
  refused resume.log "${expect[@]}"
  ! grep -q "^training " resume.log || fail "the run trained from the forged checkpoint"
  # Asked for explicitly, it is read.
  "$MGTRAIN" eval --checkpoint "$WORK/forged.h5" --data "$DATA_DIR/test.h5" --allow-unchecked >allowed.log 2>&1 ||
    { cat allowed.log; fail "eval --allow-unchecked"; }
  grep -q "^accuracy " allowed.log || { cat allowed.log; fail "eval --allow-unchecked printed no accuracy"; }
  ;;
hollow)
  run_np 2 120 train --config run.ini --train.max_steps=20 --sync.wire=bf16 >first.log 2>&1 ||
    { cat first.log; fail "the first run"; }
  param=$(h5ls ckpt/step-20.h5/params | awk 'NR == 1 { print $1 }')
  # 2^31 float32 values: 8 GiB declared, nothing stored.
  cp ckpt/step-20.h5 params.h5
  h5edit params.h5 hollow "/params/$param" 2147483648
  cp ckpt/step-20.h5 sync.h5
  h5edit sync.h5 hollow /sync/residual.rank0 2147483648
  limited() { bash -c 'ulimit -v 2097152 && exec "$@"' limited "$@"; }
  rc=0
  limited "$MGTRAIN" compare ckpt/step-20.h5 params.h5 >compare.log 2>&1 || rc=$?
  refused compare.log "checkpoint 'params.h5': dataset '/params/$param' declares shape [2147483648] but stores 0 of its 8589934592 bytes"
  ! grep -q "bad_alloc\|out of host memory" compare.log || fail "compare allocated the declared size"
  rc=0
  timeout --kill-after=10 120 mpirun -np 2 --oversubscribe bash -c 'ulimit -v 2097152 && exec "$@"' limited \
    "$MGTRAIN" train --config run.ini --train.max_steps=30 --sync.wire=bf16 --resume "$WORK/sync.h5" \
    --checkpoint.dir="$WORK/resumed" >resume.log 2>&1 || rc=$?
  refused resume.log "checkpoint '$WORK/sync.h5': dataset '/sync/residual.rank0' declares shape [2147483648] but stores 0"
  ! grep -q "bad_alloc\|out of host memory" resume.log || fail "--resume allocated the declared size"
  ;;
plugin_paths)
  # The run takes a model plugin from a --plugin-path; the checkpoint records where.
  mkdir plugins
  cp "$TEST_PLUGIN_DIR/hand-written/libmgtrain-model-tanh_mlp.so" plugins/
  run_np 2 120 train --config run.ini --train.max_steps=10 --model.name=tanh_mlp --plugin-path "$WORK/plugins" \
    >first.log 2>&1 || { cat first.log; fail "the run with a plugin from --plugin-path"; }
  h5dump -a /plugin_paths ckpt/step-10.h5 | grep -qF "model:tanh_mlp=$WORK/plugins/libmgtrain-model-tanh_mlp.so" ||
    { h5dump -a /plugin_paths ckpt/step-10.h5; fail "the checkpoint does not record the plugin's path"; }
  # Someone replaces that file with a library whose constructor leaves a marker.
  cat >evil.c <<'C'
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void evil_loaded(void) {
  int fd = open(MARKER, O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
}
C
  cc -shared -fPIC -DMARKER="\"$WORK/evil-ran\"" evil.c -o plugins/libmgtrain-model-tanh_mlp.so ||
    fail "could not build the planted library"
  for command in eval export generate; do
    case $command in
    eval) args=(--data "$DATA_DIR/test.h5") ;;
    export) args=(--out "$WORK/model.onnx") ;;
    generate) args=(--prompt "a" --tokens 1) ;;
    esac
    rc=0
    "$MGTRAIN" $command --checkpoint "$WORK/ckpt/step-10.h5" "${args[@]}" >$command.log 2>&1 || rc=$?
    [ ! -e "$WORK/evil-ran" ] || { cat $command.log; fail "$command loaded the library the checkpoint recorded"; }
    [ $command = generate ] && { [ $rc -ne 0 ] || fail "generate of an MLP's checkpoint succeeded"; continue; }
    refused $command.log "unknown model plugin 'tanh_mlp'" \
      "the checkpoint's run loaded it from $WORK/plugins/libmgtrain-model-tanh_mlp.so, which is not loaded on a checkpoint's word"
  done
  ;;
out_of_memory)
  # A model whose parameters, gradients and momentum (3 x 4 x 16384^2 bytes, 3 GiB) exceed 2 GiB.
  rc=0
  timeout --kill-after=10 120 mpirun -np 1 --oversubscribe bash -c 'ulimit -v 2097152 && exec "$@"' limited \
    "$MGTRAIN" train --config run.ini --model.hidden=16384,16384 --train.max_steps=1 >model.log 2>&1 || rc=$?
  refused model.log "[rank 0] out of host memory during start-up: lower the model's sizes (model.* keys)"
  ! grep -q "bad_alloc" model.log || fail "std::bad_alloc reached the user"
  # A real 1 GiB parameter in a checkpoint, compared with 2 GiB of address space: the second copy
  # does not fit.
  run_np 2 120 train --config run.ini --train.max_steps=10 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  param=$(h5ls ckpt/step-10.h5/params | awk 'NR == 1 { print $1 }')
  cp ckpt/step-10.h5 big.h5
  "$python" - "$WORK/big.h5" "/params/$param" <<'PY' || fail "could not write the large parameter"
import sys, zlib, h5py, numpy
with h5py.File(sys.argv[1], "r+") as f:
    attrs = dict(f[sys.argv[2]].attrs)
    del f[sys.argv[2]]
    n = 1 << 28
    d = f.create_dataset(sys.argv[2], shape=(n,), dtype="<f4")
    block, crc = numpy.zeros(1 << 24, dtype="<f4"), 0
    for start in range(0, n, 1 << 24):
        d[start:start + (1 << 24)] = block
        crc = zlib.crc32(block.tobytes(), crc)
    for name, value in attrs.items():
        d.attrs[name] = value
    d.attrs.modify("crc32", numpy.uint32(crc))
PY
  rc=0
  bash -c 'ulimit -v 2097152 && exec "$@"' limited "$MGTRAIN" compare big.h5 big.h5 >compare.log 2>&1 || rc=$?
  refused compare.log "out of host memory reading dataset '/params/$param' of checkpoint 'big.h5' (1024 MiB)"
  ! grep -q "bad_alloc" compare.log || fail "std::bad_alloc reached the user"
  rm -f big.h5
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
