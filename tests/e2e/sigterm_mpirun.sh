#!/usr/bin/env bash
# SIGTERM to mpirun, as a user's `kill -TERM` or a batch system's cancel reaches it, at a random
# step of a np=2 run: Open MPI passes it to the ranks odls_base_sigkill_timeout (1 s) later and
# kills them a second after that, so the ranks stop after the step in flight, write the final
# checkpoint and say so in time. A run is lost when training had started and there is no final
# checkpoint (`latest` naming the step the stop line names) or no stop line; `done:` must not come
# twice. It may not come at all: mpirun stops reading the ranks' stdout while it ends the job, and
# what waits there when it kills them is gone (the stop line goes to stderr); the count says how
# often. Open MPI's own settings are left as a user has them. Counts every try, then fails on any
# lost run. scripts/stress_sigterm.sh runs it at length. slow_steps: the MLP with steps of 200 ms
# (the test-only MGTRAIN_TEST_SLOW_RANK, whatever the machine), where waiting for several steps
# cannot fit in mpirun's second.
# Usage: sigterm_mpirun.sh mlp|gpt|slow_steps RUNS
source "$(dirname "$0")/lib.sh"
model=$1 runs=${2:-3}

case $model in
  mlp | slow_steps)
    # Long enough that it is still training when the signal reaches the ranks, however slowly a
    # loaded machine's mpirun passes it on.
    write_config run.ini "[data]" "test =" "[train]" "epochs = 200" "log_every = 10" "[checkpoint]" "every_steps = 0"
    [ "$model" = mlp ] || export MGTRAIN_TEST_SLOW_RANK=0:200
    ;;
  gpt)
    # A gpt whose checkpoint (parameters and Adam's moments) is about 1.5 MB.
    require_fortunes
    "$MGTRAIN" data convert --text "$FORTUNES/cookie" "$FORTUNES/computers" --out train.h5 >convert.log 2>&1 ||
      { cat convert.log; fail "data convert --text"; }
    write_config run.ini "[data]" "train = $WORK/train.h5" "test =" "[model]" "name = gpt" "layers = 2" "heads = 2" \
      "dim = 64" "context = 64" "[optimizer]" "name = adam" "lr = 0.002" "[train]" "epochs = 200" \
      "global_batch = 16" "log_every = 10" "[checkpoint]" "every_steps = 0"
    ;;
  *) fail "unknown model $model (expected mlp, gpt or slow_steps)" ;;
esac

lost=0 twice=0 stopped=0 finished=0 no_done=0
declare -A statuses=()
for try in $(seq "$runs"); do
  log=$WORK/try-$try.log
  rm -rf "$WORK/ckpt"
  timeout --kill-after=10 300 mpirun -np 2 --oversubscribe "$MGTRAIN" train --config run.ini >"$log" 2>&1 &
  job=$!
  mpirun_pid=$(for _ in $(seq 250); do p=$(pgrep -P "$job" -x mpirun) && { echo "$p"; break; }; sleep 0.02; done)
  [ -n "$mpirun_pid" ] || fail "try $try: mpirun did not start"
  for _ in $(seq 1200); do grep -q "^training " "$log" && break; sleep 0.05; done
  grep -q "^training " "$log" || { cat "$log"; fail "try $try: the run did not start training within 60 s"; }
  # A random step: up to 3 s into training.
  sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", rand() * 3 }')"
  kill -TERM "$mpirun_pid" 2>/dev/null || true
  rc=0
  wait "$job" || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { cat "$log"; fail "try $try: the run hung after SIGTERM"; }
  statuses[$rc]=$((${statuses[$rc]:-0} + 1))
  dones=$(grep -c '^done: ' "$log" || true)
  # Not from the line's start: mpirun may put it after a progress line it had read only in part.
  step=$(sed -n 's/.*stopped by signal [0-9]* at step \([0-9]*\):.*/\1/p' "$log" | head -n 1)
  what=
  if [ "$dones" -gt 1 ]; then
    twice=$((twice + 1)) what="done: $dones times"
  fi
  if [ -n "$step" ]; then
    if [ "$(cat "$WORK/ckpt/latest" 2>/dev/null)" = "step-$step.h5" ] &&
      "$MGTRAIN" compare "$WORK/ckpt/step-$step.h5" "$WORK/ckpt/step-$step.h5" >/dev/null 2>&1; then
      stopped=$((stopped + 1)) what="${what:+$what; }stopped at step $step, final checkpoint and line"
      [ "$dones" -ge 1 ] || { no_done=$((no_done + 1)) what="$what, no done: line"; }
    else
      lost=$((lost + 1)) what="LOST: stopped at step $step, latest '$(cat "$WORK/ckpt/latest" 2>/dev/null)', $dones done: line(s)"
    fi
  elif [ "$dones" -ge 1 ]; then
    finished=$((finished + 1)) what="${what:+$what; }finished before the signal"
  else
    lost=$((lost + 1)) what="LOST: no stop line, no done: line"
  fi
  echo "try $try ($model): rc $rc, $what"
  case $what in LOST* | done:*) echo "--- its log, and its checkpoint directory:"; tail -n 20 "$log"; ls -la ckpt || true ;; esac
done
rcs=$(for s in "${!statuses[@]}"; do echo "rc $s: ${statuses[$s]}"; done | sort | paste -sd, -)
echo "sigterm to mpirun, $model np=2: $runs runs, $stopped stopped with a final checkpoint and line ($no_done" \
  "of them without done:), $finished finished first, $lost lost, $twice with done: twice; $rcs"
[ "$lost" = 0 ] || fail "$lost of $runs runs lost (no final checkpoint or no stop line)"
[ "$twice" = 0 ] || fail "$twice of $runs runs printed done: more than once"
