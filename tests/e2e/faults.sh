#!/usr/bin/env bash
# One injected fault at np=4 (MGTRAIN_FAULT): the job must exit non-zero within comm.timeout_s
# + 30 s, some line must name the lost rank, no mgtrain process may be left, `latest` must point
# at a checkpoint written before the fault, and resuming from it must end bitwise equal to a run
# that was never interrupted.
# Usage: faults.sh RANK PHASE ACTION
source "$(dirname "$0")/lib.sh"
rank=$1 phase=$2 action=$3
np=4 steps=40 timeout_s=3
# Compute phases fault at step 25 (after the checkpoints of steps 10 and 20); checkpoint phases
# during the write of step 30. Either way the last good checkpoint is step 20.
case $phase in checkpoint-*) fault_step=30 ;; *) fault_step=25 ;; esac

write_config run.ini "[train]" "max_steps = $steps" "log_every = 10" "progress = lines" \
  "[checkpoint]" "every_steps = 10" "keep = 0" "[comm]" "timeout_s = $timeout_s"

run_np $np 300 train --config run.ini --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
  { cat straight.log; fail "the uninterrupted run failed"; }

start=$(date +%s)
rc=0
MGTRAIN_FAULT=$rank:$fault_step:$phase:$action run_np $np 120 train --config run.ini >fault.log 2>&1 || rc=$?
elapsed=$(( $(date +%s) - start ))
cat fault.log
echo "fault $rank:$fault_step:$phase:$action: exit $rc after ${elapsed}s"
grep -q "injected fault (MGTRAIN_FAULT) at step $fault_step in $phase" fault.log || fail "the fault did not fire"
[ $rc -ne 0 ] || fail "the job exited 0"
# (137 is mpirun passing on a SIGKILL; the outer limit is 120 s, far above the bound below.)
[ $rc -ne 124 ] || fail "the job hung until the outer limit"
[ $elapsed -le $((timeout_s + 30)) ] || fail "took ${elapsed}s, more than comm.timeout_s + 30 s"

# Who names the lost rank depends on how it went: mpirun for a killed or exited process, the rank
# itself for an error it could report, the others' deadline for one that hangs.
case $action in
  kill)  pattern="process rank $rank with PID .* exited on signal 9" ;;
  exit)  pattern="Process name: \[\[[0-9]*,1\],$rank\]" ;;
  throw) pattern="mgtrain: error: \[rank $rank\] injected fault at step $fault_step in $phase" ;;
  hang)  pattern="mgtrain: error: \[rank [0-9]\] timed out after $timeout_s s at step $fault_step in .* waiting for rank $rank, which never reached it" ;;
esac
grep -q "$pattern" fault.log || fail "no line names rank $rank (expected /$pattern/)"

no_ranks_left

# Rank 0 writes: a fault there leaves step 20 as the last checkpoint, or step 10 where rank 0
# ended (step 25) while step 20's write to disk was still in flight beside training. Another rank
# failing while rank 0 writes step 30 may or may not let that write finish; either is whole
# (resuming verifies its checksums).
latest=$(cat ckpt/latest)
expected=step-20.h5
[[ $rank != 0 && $phase == checkpoint-* && $latest == step-30.h5 ]] && expected=step-30.h5
[[ $rank == 0 && $phase != checkpoint-* && $latest == step-10.h5 ]] && expected=step-10.h5
[ "$latest" = "$expected" ] || fail "latest names '$latest', expected $expected"
[ "$expected" = step-30.h5 ] || [ ! -e ckpt/step-30.h5 ] ||
  fail "a checkpoint of step 30 exists although its write was interrupted"
run_np $np 300 train --config run.ini --resume latest >resume.log 2>&1 || { cat resume.log; fail "resume"; }
resumed_step=${expected#step-}; resumed_step=${resumed_step%.h5}
grep -q "resumed from step $resumed_step " resume.log || { cat resume.log; fail "did not resume from step $resumed_step"; }
if [ "$rank" = 0 ] && [ "$action" = kill ] && [[ $phase == checkpoint-* ]]; then
  grep -q "removed 1 temporary file(s) of an interrupted checkpoint write" resume.log ||
    { cat resume.log; fail "the killed write's temporary file was not cleaned up"; }
fi
if ls -a ckpt | grep -q '\.tmp-'; then ls -a ckpt; fail "temporary files are left in the checkpoint directory"; fi
a=$(group_hash straight/step-$steps.h5 /params) b=$(group_hash ckpt/step-$steps.h5 /params)
echo "params: uninterrupted $a, faulted and resumed $b"
[ "$a" = "$b" ] || fail "the resumed run differs from the uninterrupted one"
