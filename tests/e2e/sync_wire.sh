#!/usr/bin/env bash
# The bucketed all-reduce's forms on one node (allreduce and grad_accum):
#   bf16: sync.wire = bf16 (gradients rounded to bfloat16 with error feedback) trains as FP32 does
#     at np=2; every rank's residual is in the checkpoints and comes back on resume (verify PASS).
#   hierarchical: sync.hierarchical = on on one node (a leaders' communicator of one rank) gives
#     the flat all-reduce's result within FP tolerance, blocking and overlapped, at np=4.
#   refused: an unsupported sync.wire or sync.hierarchical, or bf16 in deterministic mode, stops
#     the job before step 1 with one line naming the key.
source "$(dirname "$0")/lib.sh"

accuracy() { grep '^{' "$1" | tail -n 1 | json_field test_accuracy; }
within() {  # within A B MARGIN
  awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= m) }'
}

case $1 in
  bf16)
    write_config run.ini
    common=(--config run.ini --train.max_steps=300 --train.log_every=100 --json)
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/fp32" >fp32.log 2>&1 || { cat fp32.log; fail "fp32"; }
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/bf16" --sync.wire=bf16 --checkpoint.every_steps=100 \
      >bf16.log 2>&1 || { cat bf16.log; fail "sync.wire = bf16"; }
    fp32=$(accuracy fp32.log) bf16=$(accuracy bf16.log)
    echo "300 steps at np=2: test accuracy fp32 $fp32, bf16 $bf16"
    [ -n "$fp32" ] && [ -n "$bf16" ] || fail "a run reported no test accuracy"
    within "$fp32" "$bf16" 0.01 || fail "bf16 wire: test accuracy $bf16 is more than 0.01 from fp32's $fp32"
    check_residuals bf16/step-100.h5 2
    # Straight, and stopped + resumed: the same bits only when the residuals come back. Overlapped
    # and through the node's leader, so the non-blocking stages are checked too; grad_accum alike.
    for sync in "--sync.overlap=true --sync.hierarchical=on" "--sync.name=grad_accum --sync.accum_steps=2"; do
      # shellcheck disable=SC2086  # the options are separate words
      run_np 2 600 verify --config run.ini --sync.wire=bf16 $sync --steps 40 >verify.log 2>&1 ||
        { cat verify.log; fail "verify failed with sync.wire = bf16 $sync"; }
      grep -q "^PASS" verify.log || { cat verify.log; fail "verify did not pass with sync.wire = bf16 $sync"; }
      echo "verify, sync.wire = bf16 $sync: $(grep '^PASS' verify.log)"
    done
    ;;
  hierarchical)
    write_config run.ini
    common=(--config run.ini --train.max_steps=100 --train.log_every=50 --json)
    run_np 4 300 train "${common[@]}" --checkpoint.dir="$WORK/flat" --sync.hierarchical=off >flat.log 2>&1 ||
      { cat flat.log; fail "flat"; }
    for form in blocking overlapped; do
      overlap=false
      [ $form = overlapped ] && overlap=true
      run_np 4 300 train "${common[@]}" --checkpoint.dir="$WORK/$form" --sync.hierarchical=on \
        --sync.overlap=$overlap >$form.log 2>&1 || { cat $form.log; fail "hierarchical, $form"; }
      grep -q "hierarchical = on" $form.log || { head -n 40 $form.log; fail "the resolved config lacks it"; }
      "$MGTRAIN" compare flat/step-100.h5 $form/step-100.h5 --rtol 1e-3 >compare.log 2>&1 ||
        { cat compare.log; fail "hierarchical ($form) and flat parameters differ beyond rtol 1e-3"; }
      flat=$(accuracy flat.log) hier=$(accuracy $form.log)
      echo "100 steps at np=4 on one node: test accuracy flat $flat, hierarchical ($form) $hier"
      within "$flat" "$hier" 0.005 || fail "hierarchical ($form) accuracy $hier differs from flat $flat"
    done
    # grad_accum through the leader, overlapped, trains too.
    run_np 4 300 train --config run.ini --train.max_steps=20 --checkpoint.dir="$WORK/accum" --sync.name=grad_accum \
      --sync.hierarchical=on --sync.overlap=true --sync.wire=bf16 >accum.log 2>&1 || { cat accum.log; fail "grad_accum"; }
    ;;
  refused)
    write_config run.ini
    for bad in "--sync.wire=fp16|config key 'sync.wire' (command line).*fp32 or bf16.*fp16" \
      "--sync.hierarchical=maybe|config key 'sync.hierarchical' (command line).*auto or on or off.*maybe" \
      "--sync.deterministic=true --sync.wire=bf16|config key 'sync.wire' = bf16: expected fp32 with sync.deterministic = true"; do
      args=${bad%%|*} pattern=${bad#*|}
      set +e
      # shellcheck disable=SC2086
      run_np 2 120 train --config run.ini --train.max_steps=5 $args >out.log 2>&1
      rc=$?
      set -e
      [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat out.log; fail "$args: exit $rc"; }
      line=$(one_error_line out.log)
      echo "$line" | grep -q "$pattern" || fail "$args: the error does not match '$pattern'"
    done
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
