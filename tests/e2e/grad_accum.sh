#!/usr/bin/env bash
# Gradient accumulation: np=2 with k=2 micro-batches of 32 gives the parameters of np=2 with k=1
# and 64 per rank (the same global batch of 128), within 1e-6 relative.
source "$(dirname "$0")/lib.sh"
write_config run.ini
steps=30
run_np 2 300 train --config run.ini --train.max_steps=$steps --checkpoint.dir="$WORK/k1" >k1.log 2>&1 || { cat k1.log; fail "k=1"; }
run_np 2 300 train --config run.ini --train.max_steps=$steps --checkpoint.dir="$WORK/k2" \
  --sync.name=grad_accum --sync.accum_steps=2 >k2.log 2>&1 || { cat k2.log; fail "k=2"; }
grep -q "2 training ranks x 32 x 2 micro-batches" k2.log || { cat k2.log; fail "k=2 did not run micro-batches of 32"; }
"$MGTRAIN" compare k1/step-$steps.h5 k2/step-$steps.h5 --rtol 1e-6 || fail "parameters differ by more than 1e-6 relative"
# The comparison must be able to fail: a run with another seed does not match.
run_np 2 300 train --config run.ini --train.max_steps=$steps --train.seed=99 --checkpoint.dir="$WORK/other" >other.log 2>&1
! "$MGTRAIN" compare k1/step-$steps.h5 other/step-$steps.h5 --rtol 1e-6 >/dev/null || fail "compare accepted different runs"
