#!/usr/bin/env bash
# A sync strategy with state of its own: examples/plugin's bf16_ef (a bfloat16 all-reduce with
# error feedback), built out of tree against the installed SDK. At np=2 it trains as the FP32
# all-reduce does; each checkpoint keeps every rank's residual (/sync/residual.rank<R>), so
# `mgtrain verify` finds the stopped and resumed run equal to the straight one; a resume on
# another number of ranks says that the residuals start again.
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH

build_example_plugins libmgtrain-sync-bf16_ef.so

write_config run.ini
common=(--config run.ini --plugin-path "$PLUGIN_BUILD/plugins" --train.max_steps=200 --train.log_every=50 --json)

# The same run in FP32 and in bfloat16 with error feedback: the test accuracy within 0.02.
run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/fp32" >fp32.log 2>&1 || { cat fp32.log; fail "allreduce"; }
run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/ef" --sync.name=bf16_ef --checkpoint.every_steps=100 \
  >ef.log 2>&1 || { cat ef.log; fail "bf16_ef"; }
fp32=$(grep '^{' fp32.log | tail -n 1 | json_field test_accuracy)
ef=$(grep '^{' ef.log | tail -n 1 | json_field test_accuracy)
echo "200 steps at np=2: test accuracy allreduce $fp32, bf16_ef $ef"
awk -v a="$fp32" -v b="$ef" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02) }' || fail "bf16_ef trains differently"

check_residuals ef/step-100.h5 2

# Straight, and stopped + resumed: the same bits only when the residuals come back.
run_np 2 600 verify --config run.ini --plugin-path "$PLUGIN_BUILD/plugins" --sync.name=bf16_ef --steps 40 \
  >verify.log 2>&1 || { cat verify.log; fail "verify failed with bf16_ef"; }
cat verify.log | grep -E '^(PASS|FAIL|straight|resumed)' || true
grep -q "^PASS" verify.log || { cat verify.log; fail "verify did not pass"; }

# Resumed at np=1 from the np=2 checkpoint: one note, and the run goes on. Its checkpoints go to a
# directory of their own: step-200 of the straight run stands beside step-100 in ef/.
run_np 1 300 train "${common[@]}" --checkpoint.dir="$WORK/ef-np1" --sync.name=bf16_ef --train.max_steps=150 \
  --resume "$WORK/ef/step-100.h5" >one.log 2>&1 || { cat one.log; fail "resume at np=1"; }
grep -q "mgtrain: note: sync bf16_ef: the checkpoint's run had 2 rank(s), this one 1: the error-feedback residuals start again from zero" one.log \
  || { cat one.log; fail "no note on the residuals at another number of ranks"; }
echo PASS
