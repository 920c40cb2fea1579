#!/usr/bin/env bash
# Inputs that once crashed, hung or were silently ignored: each is now refused with one
# "mgtrain: error:" line naming it, a non-zero exit and no rank left waiting.
# Usage: hostile_input.sh CASE
source "$(dirname "$0")/lib.sh"
write_config run.ini

# Runs "$@" (an mgtrain command line, under mpirun -np 2 when the first word is "mpi"), expecting a
# non-zero exit within the time limit and exactly one error line that holds EXPECT.
refused() {  # refused EXPECT [mpi] ARGS...
  local expect=$1 rc; shift
  set +e
  if [ "$1" = mpi ]; then
    shift
    run_np 2 60 "$@" >out.log 2>err.log
  else
    timeout --kill-after=5 30 "$MGTRAIN" "$@" >out.log 2>err.log
  fi
  rc=$?
  set -e
  echo "mgtrain $*: exit $rc"
  [ $rc -ne 0 ] || { cat out.log err.log; fail "exit code 0 for mgtrain $*"; }
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat err.log; fail "mgtrain $* hung and was killed by the time limit"; }
  [ $rc -lt 128 ] || { cat err.log; fail "mgtrain $* died on signal $((rc - 128))"; }
  local line
  line=$(one_error_line err.log)
  echo "$line"
  grep -qF -- "$expect" <<<"$line" || fail "the error line does not say '$expect'"
}

build_plugin() {  # the build tree's plugin library NAME (libmgtrain-KIND-NAME.so)
  local found
  found=$("$MGTRAIN" plugins | awk -v f="/$1" 'index($0, f) && !/^refused/ { print $NF; exit }')
  [ -f "$found" ] || fail "no $1 among mgtrain plugins"
  echo "$found"
}

case $1 in
  # A plugin cut short: the loader would map segments past the end of the file (SIGBUS).
  truncated_plugin)
    mlp=$(build_plugin libmgtrain-model-mlp.so)
    run_np 1 120 train --config run.ini --train.max_steps=1 --checkpoint.dir="$WORK/ckpt1" >train.log 2>&1 ||
      { cat train.log; fail "the checkpoint for eval could not be trained"; }
    checkpoint=$(ls "$WORK"/ckpt1/step-*.h5 | head -1)
    for bytes in 1000 5000 20000; do
      mkdir -p "cut$bytes"
      head -c $bytes "$mlp" >"cut$bytes/libmgtrain-model-mlp.so"
      file="$WORK/cut$bytes/libmgtrain-model-mlp.so"
      "$MGTRAIN" plugins --plugin-path "cut$bytes" >plugins.log 2>&1 || { cat plugins.log; fail "mgtrain plugins failed"; }
      grep -q "^refused: cut$bytes/libmgtrain-model-mlp.so: .*but the file has $bytes bytes (truncated?)" plugins.log ||
        { cat plugins.log; fail "mgtrain plugins does not list the $bytes-byte plugin as truncated"; }
      "$MGTRAIN" config-keys --plugin-path "cut$bytes" >keys.log 2>err.log || { cat err.log; fail "config-keys failed"; }
      grep -q "^mgtrain: warning: plugin 'cut$bytes/libmgtrain-model-mlp.so' is refused: .*truncated" err.log ||
        { cat err.log; fail "config-keys does not say the $bytes-byte plugin is refused"; }
      refused "plugin '$file' declares" mpi train --config run.ini --plugin-path="$WORK/cut$bytes" --train.max_steps=1
      refused "plugin '$file' declares" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" \
        --plugin-path "$WORK/cut$bytes"
    done ;;
  # Files that are not regular files never end (/dev/zero) or block (a FIFO nobody writes).
  special_config)
    mkfifo fifo
    refused "config file 'fifo' cannot be read: it is a FIFO, not a regular file" mpi train --config fifo
    refused "config file '/dev/zero' cannot be read: it is a character device, not a regular file" \
      mpi train --config /dev/zero
    head -c $((17 << 20)) /dev/zero | tr '\0' '#' >huge.ini
    refused "config file 'huge.ini' is larger than 16 MiB" mpi train --config huge.ini ;;
  special_data)
    mkfifo fifo
    refused "data file '$WORK/fifo' is a FIFO, not a regular file (expected an HDF5 file)" \
      mpi train --config run.ini --data.train="$WORK/fifo"
    refused "data file '$WORK/fifo' is a FIFO" mpi train --config run.ini --data.test="$WORK/fifo"
    refused "data file 'fifo' is a FIFO" data inspect fifo
    refused "data file '/dev/zero' is a character device" data inspect /dev/zero
    refused "CSV file '/dev/zero' is a character device, not a regular file" \
      data convert --csv /dev/zero --shape 784 --out x.h5
    refused "CSV file 'fifo' is a FIFO" data convert --csv fifo --shape 784 --out x.h5
    refused "IDX file 'fifo' is a FIFO" data convert --images fifo --labels fifo --out x.h5
    # A directory has no data rows: it is named as what it is.
    refused "CSV file '.' is a directory, not a regular file (expected a CSV file)" \
      data convert --csv . --shape 784 --out x.h5
    refused "IDX file '$WORK' is a directory, not a regular file" data convert --images fifo --labels "$WORK" --out x.h5
    [ ! -e x.h5 ] || fail "a refused conversion left x.h5" ;;
  # Sizes far beyond memory: refused naming the key, value and limit before anything is allocated.
  model_sizes)
    refused "config key 'model.hidden' (command line): expected a size from 1 to 16777216, got 2147483648" \
      mpi train --config run.ini --model.hidden=2147483648
    refused "config key 'model.inputs' (command line): expected a size from 1 to 16777216, got 2147483648" \
      mpi train --config run.ini --model.inputs=2147483648
    refused "config key 'model.classes' (command line): expected a size from 1 to 16777216, got 2147483648" \
      mpi train --config run.ini --model.classes=2147483648
    refused "config key 'model.kernel' (command line): expected a size from 1 to 28, got 2147483648" \
      mpi train --config run.ini --model.name=cnn --model.kernel=2147483648
    refused "config key 'model.channels' (command line): expected a size from 1 to 16777216, got 2147483648" \
      mpi train --config run.ini --model.name=cnn --model.channels=8,2147483648
    refused "config key 'model.width' (command line): expected a size from 1 to 4194304, got 2147483648" \
      mpi train --config run.ini --model.name=resnet --model.width=2147483648
    refused "config key 'model.input_shape' (command line): expected a size from 1 to 16777216, got 2147483648" \
      mpi train --config run.ini --model.name=cnn --model.input_shape=1,2147483648,28
    # Each size within its limit, together far beyond this host's memory.
    refused "the model's parameters and gradients need" \
      mpi train --config run.ini --model.inputs=16777216 --model.hidden=16777216 ;;
  # A batch larger than the file: capped at its rows.
  eval_batch)
    awk 'BEGIN { for (i = 0; i < 512; i++) { line = i % 10; for (j = 0; j < 784; j++) line = line "," (i + j) % 256; print line } }' >rows.csv
    "$MGTRAIN" data convert --csv rows.csv --shape 784 --out rows.h5 >/dev/null
    run_np 1 120 train --config run.ini --train.max_steps=1 >train.log 2>&1 || { cat train.log; fail "training failed"; }
    checkpoint=$(ls "$WORK"/ckpt/step-*.h5 | head -1)
    "$MGTRAIN" eval --checkpoint "$checkpoint" --data rows.h5 --batch 99999999999 --json >eval.log 2>&1 ||
      { cat eval.log; fail "eval with --batch 99999999999 failed"; }
    cat eval.log
    [ "$(json_field samples <eval.log)" = 512 ] || fail "eval did not evaluate the 512 rows" ;;
  # An IDX header that declares more than the file holds, or images too large for memory.
  idx_header)
    printf '\x00\x00\x08\x01\x00\x00\x00\x01\x03' >labels.idx
    printf '\x00\x00\x08\x03\x00\x00\x00\x01\x00\x01\x00\x00\x00\x01\x00\x00' >huge-images.idx
    refused "IDX file 'huge-images.idx' declares images of 65536x65536 (4294967296 bytes each), more than the 16777216" \
      data convert --images huge-images.idx --labels labels.idx --out x.h5
    printf '\x00\x00\x08\x01\xff\xff\xff\xff\x03' >many-labels.idx
    refused "IDX file 'many-labels.idx' is truncated: header says 4294967295 labels" \
      data convert --images huge-images.idx --labels many-labels.idx --out x.h5
    gzip -c many-labels.idx >many-labels.idx.gz
    refused "IDX file 'many-labels.idx.gz' is truncated: header says 4294967295 labels, found 1" \
      data convert --images huge-images.idx --labels many-labels.idx.gz --out x.h5 ;;
  # An empty --resume is the same mistake however it is written.
  resume_empty)
    expect="train: option '--resume' is empty; expected 'latest' (newest in checkpoint.dir) or a checkpoint path"
    refused "$expect" mpi train --config run.ini --resume ""
    refused "$expect" mpi train --config run.ini --resume=
    refused "option '--config' is empty" mpi train --config ""
    # ... while a switch that takes no value is not an empty option.
    for command in train bench verify doctor; do
      "$MGTRAIN" $command --help >help.txt 2>&1 || { cat help.txt; fail "$command --help failed"; }
      grep -q -- "--config" help.txt || { cat help.txt; fail "$command --help shows no options"; }
    done ;;
  # A word that is neither an option nor an override was dropped silently.
  positional)
    refused "unexpected argument 'train.seed=3'; config overrides are written --section.key=value" \
      mpi train --config run.ini train.seed=3 hello
    refused "unexpected argument 'hello'" mpi train --config run.ini hello
    refused "unexpected argument 'hello'" mpi bench --config run.ini hello
    refused "eval: unexpected argument 'hello'" eval --checkpoint a.h5 --data b.h5 hello
    refused "plugins: unexpected argument 'hello'" plugins hello ;;
  # A --plugin-path this user cannot read is an error, not a directory skipped.
  plugin_path_unreadable)
    # A directory its user cannot list: root can list any, so as root mgtrain runs as nobody.
    mkdir -p locked && chmod 000 locked && chmod 755 "$WORK"
    as_user=()
    if [ "$(id -u)" = 0 ]; then
      as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
      command -v setpriv >/dev/null || { echo "SKIP: root, and no setpriv to run mgtrain as nobody" >&2; exit 77; }
      # Where nobody cannot run the build (a tree under /root, a user namespace without uid 65534),
      # the case would test setpriv, not mgtrain.
      "${as_user[@]}" "$MGTRAIN" --version >version.log 2>&1 ||
        { echo "SKIP: root, and nobody cannot run $MGTRAIN: $(head -1 version.log)" >&2; exit 77; }
    fi
    ! "${as_user[@]}" test -r locked -a -x locked || { echo "SKIP: $WORK/locked stays readable to $(id -un)" >&2; exit 77; }
    for command in plugins config-keys; do
      set +e
      "${as_user[@]}" "$MGTRAIN" $command --plugin-path "$WORK/locked" >out.log 2>err.log
      rc=$?
      set -e
      [ $rc -ne 0 ] || { cat out.log err.log; fail "mgtrain $command accepted an unreadable --plugin-path"; }
      one_error_line err.log | grep -qF -- "--plugin-path '$WORK/locked': Permission denied" ||
        fail "mgtrain $command does not say the --plugin-path is not readable"
    done ;;
  # A tolerance nothing can be within listed every tensor as identical, then said MISMATCH.
  compare_tolerance)
    run_np 1 120 train --config run.ini --train.max_steps=1 >train.log 2>&1 || { cat train.log; fail "training failed"; }
    checkpoint=$(ls "$WORK"/ckpt/step-*.h5 | head -1)
    for rtol in -1 -0.5 nan inf; do
      refused "compare: --rtol: expected a finite number >= 0 (0: bit for bit), got $rtol" \
        compare "$checkpoint" "$checkpoint" --rtol "$rtol"
      ! grep -q identical out.log || { cat out.log; fail "compare --rtol $rtol compared the tensors"; }
    done
    "$MGTRAIN" compare "$checkpoint" "$checkpoint" --rtol 1e-6 >out.log || { cat out.log; fail "compare --rtol 1e-6"; }
    tail -1 out.log | grep -q '^MATCH' || { cat out.log; fail "a checkpoint does not match itself"; } ;;
  # A path stat() cannot look at was said not to exist: a symbolic link loop is named as one, as
  # is a loop on the way to a path and a link to nothing.
  symlink_loop)
    loop="is a symbolic link loop (ELOOP: Too many levels of symbolic links)"
    ln -s loop loop
    ln -s nowhere.h5 dangling.h5
    refused "--resume loop: checkpoint 'loop' $loop" mpi train --config run.ini --resume loop
    refused "checkpoint 'loop/step-1.h5' cannot be reached: a symbolic link on its way loops (ELOOP" \
      mpi train --config run.ini --resume loop/step-1.h5
    refused "data file 'loop' $loop" mpi train --config run.ini --data.train=loop
    refused "data.test: data file 'loop' $loop" mpi train --config run.ini --data.test=loop
    refused "data file 'loop' $loop" data inspect loop
    refused "data file 'dangling.h5' is a symbolic link to 'nowhere.h5', which does not exist" data inspect dangling.h5
    refused "checkpoint 'loop' $loop" eval --checkpoint loop --data "$DATA_DIR/test.h5"
    refused "CSV file 'loop' $loop" data convert --csv loop --shape 784 --out x.h5
    refused "IDX file 'loop' $loop" data convert --images loop --labels loop --out x.h5
    refused "image folder 'loop' $loop" data convert --image-folder loop --size 8 --out x.h5
    refused "report: run directory 'loop' $loop" report loop
    # checkpoint.dir's latest a loop, or naming a checkpoint that is one.
    mkdir -p ckpt && ln -s latest ckpt/latest
    refused "'$WORK/ckpt/latest' $loop (expected a file naming the newest checkpoint)" \
      mpi train --config run.ini --resume latest
    rm ckpt/latest && echo step-1.h5 >ckpt/latest && ln -s step-1.h5 ckpt/step-1.h5
    refused "--resume latest: '$WORK/ckpt/latest' points to '$WORK/ckpt/step-1.h5', which $loop" \
      mpi train --config run.ini --resume latest ;;
  # Control bytes from a config value or a file were printed raw in the resolved config, the done:
  # line and data inspect, where they move the cursor or retitle the terminal (error lines escaped them).
  control_output)
    esc=$'\e'
    python=$(h5py_python)
    dir="$WORK/ck${esc}[31mred"
    write_config run.ini "[checkpoint]" "dir = $dir"
    run_np 2 120 train --config run.ini --train.max_steps=2 >out.log 2>err.log || { cat out.log err.log; fail "training"; }
    no_raw_escape() {  # no_raw_escape LOG WHAT: LOG holds no ESC byte
      ! grep -q "$esc" "$1" || { sed -n l "$1"; fail "$2 printed an escape sequence raw"; }
    }
    no_raw_escape out.log "train"
    no_raw_escape err.log "train"
    grep -qF 'dir = '"$WORK"'/ck\x1b[31mred' out.log || { cat out.log; fail "the resolved config does not escape checkpoint.dir"; }
    grep -qF 'done: 2 steps, ' out.log && grep -qF "checkpoint $WORK/ck\\x1b[31mred/step-2.h5" out.log ||
      { cat out.log; fail "the done: line does not escape the checkpoint's path"; }
    "$MGTRAIN" eval --checkpoint "$dir/step-2.h5" --data "$DATA_DIR/test.h5" >out.log 2>&1 || { cat out.log; fail "eval"; }
    no_raw_escape out.log "eval"
    "$MGTRAIN" compare "$dir/step-2.h5" "$dir/step-2.h5" >out.log 2>&1 || { cat out.log; fail "compare"; }
    no_raw_escape out.log "compare"
    # A data file's attributes and class names.
    cp "$DATA_DIR/test.h5" test.h5
    "$python" - <<PY
import h5py, numpy as np
with h5py.File("test.h5", "r+") as f:
    f.attrs["source"] = "\x1b]0;retitled\x07\x1b[2J"
    f["x"].attrs["class_names"] = np.array([("c%d\x1b[1m" % i).encode() for i in range(10)])
    f["x"].attrs["note\x1b[5m"] = 1
PY
    "$MGTRAIN" data inspect test.h5 >out.log 2>&1 || { cat out.log; fail "data inspect"; }
    no_raw_escape out.log "data inspect"
    grep -qF '\x1b]0;retitled\x07\x1b[2J' out.log || { cat out.log; fail "data inspect does not show the escaped source"; }
    grep -qF 'c3\x1b[1m' out.log || { cat out.log; fail "data inspect does not show the escaped class names"; } ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
