#!/usr/bin/env bash
# A stop signal during a step that runs for minutes: the first one waits for the step (a polite
# stop writes the step's checkpoint), but a second signal a second or more later, or a stop
# pending longer than train.stop_grace_s, ends the ranks within seconds, mid-step, writing nothing
# new: rank 0 says so in one line naming the newest intact checkpoint, and the job's status is
# 128 + the signal. The signals go to the ranks, as scancel sends them (mpirun signalled itself
# kills the ranks a second later anyway).
#   second: the step sleeps for 10 minutes (the test-only MGTRAIN_TEST_SLOW_RANK, so that its length
#           does not depend on the machine), no grace limit; SIGTERM, then SIGTERM again
#   grace:  the same step, train.stop_grace_s = 2, one SIGTERM
#   gpt:    a real gpt step of seconds of compute (context 4096), train.stop_grace_s = 1, one
#           SIGTERM in its first step: the run ends within seconds, by the stop at the step's end
#           or mid-step, whichever this machine's speed gives, and never waits for ten such steps
# Usage: long_step.sh second|grace|gpt
source "$(dirname "$0")/lib.sh"
case_name=$1

ranks_of() { pgrep -P "$1" || true; }  # mpirun's children: the ranks of a local run
# start_run LOG ARGS...: a np=2 train in the background ($job, $mpirun_pid), until it trains.
start_run() {
  local log=$1; shift
  timeout --kill-after=10 300 mpirun -np 2 --oversubscribe "$MGTRAIN" train --config run.ini "$@" >"$log" 2>&1 &
  job=$!
  mpirun_pid=$(for _ in $(seq 250); do p=$(pgrep -P "$job" -x mpirun) && { echo "$p"; break; }; sleep 0.02; done)
  [ -n "$mpirun_pid" ] || fail "mpirun did not start"
  for _ in $(seq 1200); do grep -q "^training " "$log" && break; sleep 0.05; done
  grep -q "^training " "$log" || { cat "$log"; fail "the run did not start training within 60 s"; }
}
# ends_within SECONDS LOG: the job ends within SECONDS (a hang guard: the step itself takes
# minutes), its status in $rc.
ends_within() {
  local seconds=$1 log=$2
  for _ in $(seq $((seconds * 10))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    kill -KILL $(ranks_of "$mpirun_pid") 2>/dev/null || true
    cat "$log"
    fail "the run went on $seconds s after the stop, in the middle of its step"
  fi
  rc=0
  wait "$job" || rc=$?
}
# The one line, the status, and nothing new written: `latest` still names step-3.h5, which loads.
ended_mid_step() {  # ended_mid_step LOG WHY
  local log=$1 why=$2
  [ "$rc" = 143 ] || { cat "$log"; fail "the job ended with status $rc, expected 143 (128 + SIGTERM)"; }
  [ "$(grep -c 'mgtrain: stopped by signal' "$log")" = 1 ] || { cat "$log"; fail "expected one line from rank 0"; }
  grep -q "mgtrain: stopped by signal 15 during step 4, which $why: ending without finishing it, no new checkpoint; the previous checkpoint is intact: '$WORK/ckpt/latest' still names step-3.h5 (resubmit with --resume latest to continue)$" "$log" ||
    { cat "$log"; fail "the line does not say what happened"; }
  [ "$(cat ckpt/latest)" = step-3.h5 ] || fail "latest names $(cat ckpt/latest), expected step-3.h5"
  [ ! -e ckpt/step-4.h5 ] || fail "a checkpoint of the unfinished step 4 was written"
  "$MGTRAIN" compare ckpt/step-3.h5 ckpt/step-3.h5 >/dev/null || fail "step-3.h5 does not load"
  grep -q "^done: " "$log" && { cat "$log"; fail "a done: line after a run ended mid-step"; }
  echo "ended mid-step: $(grep -o 'mgtrain: stopped.*' "$log")"
}

case $case_name in
second | grace)
  write_config run.ini "[data]" "test =" "[train]" "log_every = 1" "[checkpoint]" "every_steps = 1"
  run_np 2 300 train --config run.ini --train.max_steps=3 >first.log 2>&1 || { cat first.log; fail "the first 3 steps"; }
  # Resumed, every step of rank 0 now takes 10 minutes: step 4 is the long one.
  export MGTRAIN_TEST_SLOW_RANK=0:600000
  if [ "$case_name" = second ]; then
    start_run long.log --resume latest --train.stop_grace_s=0
    kill -TERM $(ranks_of "$mpirun_pid")
    # The first signal waits for the step: still running after the repeat gap.
    sleep 1.5
    kill -0 "$job" 2>/dev/null || { cat long.log; fail "the first signal did not wait for the step"; }
    kill -TERM $(ranks_of "$mpirun_pid")
    ends_within 30 long.log
    ended_mid_step long.log "a second signal came before it ended"
  else
    start_run long.log --resume latest --train.stop_grace_s=2
    kill -TERM $(ranks_of "$mpirun_pid")
    ends_within 30 long.log
    ended_mid_step long.log "did not end within train.stop_grace_s = 2 s"
  fi
  ;;
gpt)
  require_fortunes
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >convert.log 2>&1 || { cat convert.log; fail "convert"; }
  write_config run.ini "[data]" "train = $WORK/train.h5" "test =" "[model]" "name = gpt" "layers = 2" "heads = 2" \
    "dim = 64" "context = 4096" "[optimizer]" "name = adam" "lr = 0.002" "[train]" "global_batch = 2" "max_steps = 20" \
    "log_every = 1" "stop_grace_s = 1" "[checkpoint]" "every_steps = 0"
  start_run gpt.log
  kill -TERM $(ranks_of "$mpirun_pid")
  # Before, the ranks went on to step 10, the next agreed one: minutes of these steps.
  ends_within 60 gpt.log
  [ "$rc" = 143 ] || { cat gpt.log; fail "the job ended with status $rc, expected 143 (128 + SIGTERM)"; }
  if grep -q "mgtrain: stopped by signal 15 during step 1, which did not end within train.stop_grace_s = 1 s: ending without finishing it, no new checkpoint; there is no earlier checkpoint in '$WORK/ckpt'$" gpt.log; then
    echo "ended mid-step: $(grep -o 'mgtrain: stopped.*' gpt.log)"
  elif grep -q "stopped by signal 15 at step 1: writing a final checkpoint" gpt.log; then
    [ "$(cat ckpt/latest)" = step-1.h5 ] || { cat gpt.log; fail "stopped at step 1 without its checkpoint"; }
    echo "the step ended within the grace: stopped at step 1 with a final checkpoint"
  else
    cat gpt.log
    fail "the run neither stopped after its first step nor said it ended mid-step"
  fi
  ;;
*) fail "unknown case $case_name" ;;
esac
