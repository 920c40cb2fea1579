#!/usr/bin/env bash
# One bad input per call, at np=2: the job must end non-zero within the time limit, printing exactly
# one "mgtrain: error:" line that names the file or key and what was expected.
# Usage: bad_input.sh CASE
source "$(dirname "$0")/lib.sh"
write_config run.ini
args=(train --config run.ini)
np=2

small_csv() {  # 50 samples of 784 features: fewer than one global batch of 128
  awk 'BEGIN { for (i = 0; i < 50; i++) { line = i % 10; for (j = 0; j < 784; j++) line = line ",0"; print line } }' >small.csv
  "$MGTRAIN" data convert --csv small.csv --shape 784 --out small.h5 >/dev/null
}

small_test() {  # small_test FEATURES LABEL: 64 samples of FEATURES features, labels up to LABEL
  awk -v f="$1" -v l="$2" 'BEGIN { for (i = 0; i < 64; i++) { line = i % (l + 1); for (j = 0; j < f; j++) line = line ",0"; print line } }' >test.csv
  "$MGTRAIN" data convert --csv test.csv --shape "$1" --out test.h5 >/dev/null
}

case $1 in
  missing_data)   args+=(--data.train=/nonexistent/train.h5); expect="/nonexistent/train.h5" ;;
  missing_test)   args+=(--data.test=/nonexistent/test.h5); expect="/nonexistent/test.h5" ;;
  not_hdf5)       echo "not an HDF5 file" >bogus.h5; args+=(--data.train="$WORK/bogus.h5"); expect="bogus.h5" ;;
  no_x)           args+=(--data.x_name=images); expect="images" ;;
  no_y)           args+=(--data.y_name=targets); expect="targets" ;;
  wrong_features) args+=(--model.inputs=100); expect="100" ;;
  wrong_rank)     small_csv; args+=(--data.train="$WORK/small.h5" --model.name=cnn --train.global_batch=8); expect="small.h5" ;;
  too_few)        small_csv; args+=(--data.train="$WORK/small.h5"); expect="fewer than one global batch" ;;
  # A test file the model cannot take is found before step 1, not after training (a short run, so
  # a late check fails on its message rather than the time limit).
  test_shape)     small_test 100 9; args+=(--data.test="$WORK/test.h5" --train.max_steps=3)
                  expect="data.test: data file '$WORK/test.h5'" ;;
  test_classes)   small_test 784 12; args+=(--data.test="$WORK/test.h5" --train.max_steps=3)
                  expect="data.test: data file '$WORK/test.h5'" ;;
  not_divisible)  args+=(--train.global_batch=127); expect="127" ;;
  unknown_plugin) args+=(--model.name=resnet9000); expect="resnet9000" ;;
  bad_abi)        args+=(--plugin-path="$TEST_PLUGIN_DIR" --model.name=badabi); expect="plugin ABI version 19, from before SDK 1.0" ;;
  unknown_key)    args+=(--model.hiden=64); expect="model.hiden" ;;
  negative_lr)    args+=(--optimizer.lr=-0.5); expect="optimizer.lr" ;;
  non_numeric_lr) args+=(--optimizer.lr=fast); expect="got 'fast'" ;;
  no_checkpoint)  args+=(--resume latest); expect="no checkpoint" ;;
  duplicate_key)  echo "optimizer.lr = 0.5" >>run.ini; expect="run.ini:17: config key 'optimizer.lr' is set twice (first at run.ini:8)" ;;
  duplicate_section) printf '[model]\nhidden = 64\n' >>run.ini; expect="run.ini:17: section [model] appears twice (first at run.ini:4)" ;;
  float_overflow) args+=(--optimizer.lr=1e300); expect="optimizer.lr' (command line): expected a positive number that a 32-bit float holds" ;;
  timeout_range)  args+=(--comm.timeout_s=1e30); expect="comm.timeout_s' (command line): expected at most 1e+09" ;;
  # 2^64 - 1: past 64 bits, so the message says the range, not only "an integer >= 0".
  seed_range)     args+=(--train.seed=18446744073709551615)
                  expect="train.seed' (command line): expected an integer from 0 to 9223372036854775807, got '18446744073709551615'" ;;
  config_dir)     args=(train --config "$WORK"); expect="config file '$WORK' cannot be read: Is a directory" ;;
  plugin_path)    args+=(--plugin-path=/nonexistent/plugins); expect="--plugin-path '/nonexistent/plugins': No such file or directory" ;;
  # A NUL and an escape sequence in a value: quoted whole, escaped.
  control_bytes)  printf '[sync]\nbucket_mb = 4\000x\033[2J\n' >>run.ini; expect="got '4\\x00x\\x1b[2J'" ;;
  # A declared model's bad entry: named with its position and text, expected versus actual.
  layers_shape)   args+=(--model.name=layers "--model.layers=conv 8 k3, gap, conv 8 k3, linear 10")
                  expect="config key 'model.layers' (command line): entry 3 'conv 8 k3' (conv2): expects an input [B, C, H, W], got [1, 8]" ;;
  layers_braces)  args+=(--model.name=layers "--model.layers=conv 8 k3, residual { relu, linear 10")
                  expect="config key 'model.layers' (command line): unbalanced braces: the '{' of entry 2 (residual, at character 21) is never closed" ;;
  *) fail "unknown case $1" ;;
esac

start=$(date +%s)
set +e
run_np $np 120 "${args[@]}" >out.log 2>err.log
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
echo "exit $rc after ${elapsed}s"; cat err.log
[ $rc -ne 0 ] || fail "exit code 0 for bad input"
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "the job hung and was killed by the time limit"
errors=$(grep -c '^mgtrain: error:' err.log || true)
[ "$errors" -eq 1 ] || fail "expected exactly one 'mgtrain: error:' line, got $errors"
grep '^mgtrain: error:' err.log | grep -qF -- "$expect" || fail "the error line does not mention '$expect'"
