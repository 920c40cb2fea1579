#!/usr/bin/env bash
# Checkpoints under damage. Usage: checkpoint_faults.sh CASE
#   enospc      checkpoints into a 5 MiB tmpfs that fills up on the third: one error line that says
#               the previous checkpoint is intact, `latest` still names it, it loads, no temporaries
#   corrupt     a byte flipped in the newest checkpoint: --resume latest refuses it with its path
#               and says checkpoint.resume_fallback would resume from the one before;
#               with checkpoint.resume_fallback = true it resumes from the one before and ends
#               bitwise equal to an uninterrupted run
#   truncated   the newest checkpoint cut in half: refused with its path
#   fallback_hint  the refusal suggests checkpoint.resume_fallback only for --resume latest with an
#               older checkpoint that loads: not for an explicit path, a model no checkpoint fits,
#               every checkpoint damaged, nor with the fallback already on
#   two_jobs    a second job started in the directory of a running one is refused, naming the
#               running job's host and pid; the running job finishes untouched
#   fresh_over_old  a run that does not resume, in a directory holding another run's checkpoints,
#               is refused before step 1 and removes nothing; checkpoint.overwrite = true replaces them
#   bad_dir     checkpoint.dir that is a file, lies under a file or is read-only: refused before
#               step 1 with the errno text
#   batch_change  resuming under another train.global_batch continues from the same sample, or is
#               refused with both values when the new batch does not divide the sample offset
source "$(dirname "$0")/lib.sh"
case=$1
write_config run.ini "[train]" "log_every = 10" "progress = lines" "[checkpoint]" "every_steps = 10" "keep = 0"

case $case in
enospc)
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: mounting a small tmpfs needs root"; exit 77; }
  mkdir -p small
  mount -t tmpfs -o size=5m mgtrain-enospc small
  trap 'umount "$WORK/small"' EXIT
  # Each MLP checkpoint is 1.9 MB (parameters and momentum): steps 10 and 20 fit, 30 does not.
  rc=0
  run_np 2 120 train --config run.ini --train.max_steps=60 --checkpoint.dir="$WORK/small/ckpt" \
    --metrics.file="$WORK/metrics.jsonl" >run.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat run.log; fail "exit $rc"; }
  line=$(one_error_line run.log)
  for part in "step-30.h5" "No space left on device" "the previous checkpoint is intact" "still names step-20.h5"; do
    [[ $line == *"$part"* ]] || fail "the error line does not say '$part'"
  done
  [ "$(cat small/ckpt/latest)" = step-20.h5 ] || fail "latest names $(cat small/ckpt/latest)"
  if ls -a small/ckpt | grep -q '\.tmp-'; then ls -la small/ckpt; fail "a temporary file is left"; fi
  "$MGTRAIN" eval --checkpoint small/ckpt/step-20.h5 --data "$DATA_DIR/test.h5" >eval.log 2>&1 ||
    { cat eval.log; fail "the previous checkpoint does not load"; }
  ;;
corrupt | truncated)
  run_np 2 120 train --config run.ini --train.max_steps=40 --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
    { cat straight.log; fail "the uninterrupted run"; }
  run_np 2 120 train --config run.ini --train.max_steps=30 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  victim=ckpt/step-30.h5
  if [ "$case" = corrupt ]; then
    # 400 kB in: inside the first layer's weights (800 kB), not HDF5's own metadata.
    byte=$(od -An -tu1 -j 400000 -N1 "$victim" | tr -d ' ')
    printf "$(printf '\\%03o' $(( byte ^ 0x10 )))" | dd of="$victim" bs=1 seek=400000 conv=notrunc status=none
    expect="checksum mismatch"
  else
    truncate -s $(( $(stat -c %s "$victim") / 2 )) "$victim"
    expect="step-30.h5"
  fi
  rc=0
  run_np 2 120 train --config run.ini --train.max_steps=40 --resume latest >refused.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat refused.log; fail "resuming from a damaged checkpoint: exit $rc"; }
  line=$(one_error_line refused.log)
  [[ $line == *"$WORK/ckpt/step-30.h5"* && $line == *"$expect"* ]] || fail "the error does not name the file and '$expect'"
  [[ $line == *"checkpoint.resume_fallback = true would resume from '$WORK/ckpt/step-20.h5'"* ]] ||
    fail "the error does not say that checkpoint.resume_fallback would resume from step 20"
  run_np 2 120 train --config run.ini --train.max_steps=40 --resume latest --checkpoint.resume_fallback=true \
    >fallback.log 2>&1 || { cat fallback.log; fail "resume with checkpoint.resume_fallback"; }
  grep "warning" fallback.log
  grep -q "warning: .*step-30.h5" fallback.log || fail "no warning names the refused checkpoint"
  grep -q "resuming from $WORK/ckpt/step-20.h5 instead" fallback.log || fail "did not fall back to step 20"
  grep -q "resumed from step 20 " fallback.log || fail "did not resume from step 20"
  a=$(group_hash straight/step-40.h5 /params) b=$(group_hash ckpt/step-40.h5 /params)
  echo "params: uninterrupted $a, after the fallback $b"
  [ "$a" = "$b" ] || fail "the run resumed from the fallback differs from the uninterrupted one"
  ;;
fallback_hint)
  # checkpoint.resume_fallback is suggested only where it would load an older checkpoint.
  run_np 2 120 train --config run.ini --train.max_steps=30 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  corrupt() {  # a byte flipped inside the first layer's weights
    local byte
    byte=$(od -An -tu1 -j 400000 -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $(( byte ^ 0x10 )))" | dd of="$1" bs=1 seek=400000 conv=notrunc status=none
  }
  resume_refused() {  # resume_refused LOG ARGS...: one error line, printed
    local log=$1 rc=0; shift
    run_np 2 120 train --config run.ini --train.max_steps=40 "$@" >"$log" 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$log"; fail "$*: exit $rc"; }
    one_error_line "$log"
  }
  corrupt ckpt/step-30.h5
  line=$(resume_refused latest.log --resume latest)
  [[ $line == *"checkpoint.resume_fallback = true would resume from '$WORK/ckpt/step-20.h5'"* ]] ||
    fail "--resume latest: no suggestion of checkpoint.resume_fallback, which would load step 20"
  # An explicit path: the fallback does not apply to it.
  line=$(resume_refused path.log --resume "$WORK/ckpt/step-30.h5")
  [[ $line != *resume_fallback* ]] || fail "checkpoint.resume_fallback suggested for an explicit path"
  # No older checkpoint loads under this config (another model), or none is undamaged.
  line=$(resume_refused other_model.log --resume latest --model.hidden=64)
  [[ $line != *resume_fallback* ]] || fail "checkpoint.resume_fallback suggested where no checkpoint fits the model"
  corrupt ckpt/step-10.h5
  corrupt ckpt/step-20.h5
  line=$(resume_refused all_damaged.log --resume latest)
  [[ $line != *resume_fallback* ]] || fail "checkpoint.resume_fallback suggested where no checkpoint loads"
  # Already on: the error says it tried each, and suggests nothing.
  line=$(resume_refused fallback_on.log --resume latest --checkpoint.resume_fallback=true)
  [[ $line == *"no checkpoint in '$WORK/ckpt' loads (checkpoint.resume_fallback tried each"* ]] ||
    fail "the fallback's error does not say it tried each checkpoint"
  [[ $line != *"= true"* ]] || fail "checkpoint.resume_fallback = true suggested while it is on"
  ;;
two_jobs)
  # The first job: 120 steps with rank 0 slowed to 250 ms a step (30 s: generous slack for the
  # second job to start and be refused while it runs), checkpoints every 20. Each rank writes its
  # own pid (as it sees it: exec keeps it) before it becomes mgtrain, so that the pid the refusal
  # names is checked against the job's ranks without /proc, whose view (another pid namespace, as
  # in some chroots and containers) and timing (the rank may have ended when /proc is read) differ.
  MGTRAIN_TEST_SLOW_RANK=0:250 timeout --kill-after=10 240 mpirun -np 2 --oversubscribe \
    bash -c 'echo $$ >>"$0"; exec "$@"' "$WORK/first.pids" "$MGTRAIN" train --config run.ini --train.max_steps=120 \
    --checkpoint.every_steps=20 --checkpoint.keep=2 >first.log 2>&1 &
  first=$!
  for _ in $(seq 100); do grep -q "^training " first.log && break; sleep 0.2; done
  grep -q "^training " first.log || { cat first.log; fail "the first job did not start"; }
  rc=0
  run_np 2 60 train --config run.ini --train.max_steps=20 --checkpoint.every_steps=10 >second.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat second.log; fail "the second job in the same directory: exit $rc"; }
  line=$(one_error_line second.log)
  [[ $line == *"$WORK/ckpt"*"in use"*"host $(hostname)"* ]] || fail "the refusal does not name the directory and host"
  holder=$(sed -n 's/.* pid \([0-9]*\).*/\1/p' <<<"$line")
  [ -n "$holder" ] && grep -qx "$holder" first.pids ||
    fail "the refusal names pid '$holder', which is not a rank of the running job (its ranks: $(tr '\n' ' ' <first.pids))"
  ! grep -q "^training \|removed .* temporary" second.log || fail "the second job went on"
  wait $first || { cat first.log; fail "the first job failed after the second one started"; }
  [ "$(cat ckpt/latest)" = step-120.h5 ] || fail "latest names $(cat ckpt/latest)"
  ;;
fresh_over_old)
  run_np 2 120 train --config run.ini --train.max_steps=30 --checkpoint.keep=2 >first.log 2>&1 ||
    { cat first.log; fail "the first run"; }
  before=$(ls ckpt | grep -v metrics)
  rc=0
  run_np 2 120 train --config run.ini --train.max_steps=20 --checkpoint.keep=2 >fresh.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat fresh.log; fail "a fresh run over another run's checkpoints: exit $rc"; }
  line=$(one_error_line fresh.log)
  for part in "$WORK/ckpt/step-30.h5" "--resume latest" "--checkpoint.overwrite=true"; do
    [[ $line == *"$part"* ]] || fail "the refusal does not say '$part'"
  done
  ! grep -q "^training " fresh.log || fail "the refused run started training"
  [ "$(ls ckpt | grep -v metrics)" = "$before" ] || { ls ckpt; fail "the refused run changed the directory"; }
  [ "$(cat ckpt/latest)" = step-30.h5 ] || fail "latest names $(cat ckpt/latest)"
  run_np 2 120 train --config run.ini --train.max_steps=10 --checkpoint.overwrite=true >over.log 2>&1 ||
    { cat over.log; fail "checkpoint.overwrite = true"; }
  grep -q "removed 2 checkpoint(s) of an earlier run" over.log || { cat over.log; fail "no note of the removal"; }
  [ "$(ls ckpt | grep -v metrics | tr '\n' ' ')" = "latest step-10.h5 " ] || { ls ckpt; fail "left: $(ls ckpt)"; }
  ;;
bad_dir)
  echo "not a directory" >afile
  mkdir -p ro
  dirs=("$WORK/afile:Not a directory" "$WORK/afile/sub:Not a directory")
  if [ "$(id -u)" -eq 0 ]; then
    mount -t tmpfs -o ro,size=1m mgtrain-ro ro
    trap 'umount "$WORK/ro"' EXIT
    dirs+=("$WORK/ro:Read-only file system" "$WORK/ro/sub:Read-only file system")
  fi
  for entry in "${dirs[@]}"; do
    dir=${entry%%:*} why=${entry#*:} rc=0
    run_np 2 60 train --config run.ini --train.max_steps=20 --checkpoint.dir="$dir" \
      --metrics.file="$WORK/metrics.jsonl" >bad.log 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat bad.log; fail "checkpoint.dir $dir: exit $rc"; }
    line=$(one_error_line bad.log)
    [[ $line == *"checkpoint.dir '$dir'"*"$why"* ]] || fail "the error does not name '$dir' and '$why'"
    ! grep -q "^training " bad.log || fail "checkpoint.dir $dir: found only after training"
  done
  ;;
batch_change)
  run_np 2 120 train --config run.ini --train.max_steps=30 >first.log 2>&1 || { cat first.log; fail "the first run"; }
  # Stopped after 30 batches of 128: sample 3840 of the epoch, which 100 does not divide.
  rc=0
  run_np 2 120 train --config run.ini --train.max_steps=40 --train.global_batch=100 --resume latest \
    >refused.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat refused.log; fail "resuming under global batch 100: exit $rc"; }
  line=$(one_error_line refused.log)
  for part in "sample 3840" "train.global_batch = 100" "128"; do
    [[ $line == *"$part"* ]] || fail "the refusal does not say '$part'"
  done
  # 256 divides it: the run continues at batch 15 of 256, the same sample.
  run_np 2 120 train --config run.ini --train.max_steps=35 --train.global_batch=256 --resume latest \
    >resumed.log 2>&1 || { cat resumed.log; fail "resuming under global batch 256"; }
  grep "resumed from" resumed.log
  grep -q "resumed from step 30 (epoch 1, batch 15)" resumed.log || fail "not resumed at batch 15 of 256"
  grep -q "sample 3840" resumed.log || fail "the log does not say where in the epoch it resumed"
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
