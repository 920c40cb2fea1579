# A stop signal at any moment of a run ends it with a final checkpoint, never a crash. The MLP is
# wide (1024x1024) so that its GEMMs run oneDNN's JIT kernels that, in the oneDNN of Debian 12,
# point the stack pointer at the heap: a stop signal's handler run on the computing thread wrote
# its frame over the heap there (free(): invalid pointer, corrupted size vs. prev_size).
# Usage: stop_signals.sh burst|mpirun|random [TRIES]
#   burst:  a stop signal to each rank every few milliseconds from the first step to the end
#   mpirun: one SIGTERM to mpirun at a random moment of training (Open MPI forwards it to the
#           ranks, then kills them odls_base_sigkill_timeout seconds later)
#   random: SIGTERM, SIGINT or SIGUSR1 to mpirun or to the ranks at a random moment from start-up
#           on; before training starts the job may end without a checkpoint, never with a crash
#   one_rank: SIGTERM to rank 1 alone (as when scancel reaches one node's tasks before another's):
#           every rank stops after the same step, and rank 0's log names the signal rank 1 got
source "$(dirname "$0")/lib.sh"
mode=$1 tries=${2:-3}

write_config run.ini "[model]" "hidden = 1024,1024" "[data]" "test =" "[train]" "epochs = 3" "log_every = 20" \
  "[checkpoint]" "every_steps = 0"

crash_pattern='corrupt|free\(\)|double free|Segmentation|Bus error|Aborted|Signal: |AddressSanitizer|ThreadSanitizer|runtime error'

ranks_of() { pgrep -P "$1" || true; }  # mpirun's children: the ranks of a local run
wait_for_training() {  # wait_for_training LOG: until the first step has run
  for _ in $(seq 600); do grep -q "^training " "$1" && return 0; sleep 0.05; done
  cat "$1" >&2
  fail "the run did not start training within 30 s"
}

for try in $(seq "$tries"); do
  log=$WORK/try-$try.log
  rm -rf "$WORK/ckpt"
  timeout --kill-after=10 300 mpirun -np 2 --oversubscribe \
    "$MGTRAIN" train --config run.ini >"$log" 2>&1 &
  job=$!
  mpirun_pid=$(for _ in $(seq 100); do p=$(pgrep -P "$job" -x mpirun) && { echo "$p"; break; }; sleep 0.02; done)
  [ -n "$mpirun_pid" ] || fail "try $try: mpirun did not start"
  expect_checkpoint=1
  case $mode in
    burst)
      wait_for_training "$log"
      ranks=$(ranks_of "$mpirun_pid")
      while kill -0 "$job" 2>/dev/null; do
        kill -TERM $ranks 2>/dev/null || true
        sleep 0.005
      done
      ;;
    mpirun)
      wait_for_training "$log"
      sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", rand() * 3 }')"
      kill -TERM "$mpirun_pid"
      ;;
    random)
      sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", rand() * 4 }')"
      grep -q "^training " "$log" || expect_checkpoint=0
      signal=$(echo TERM INT USR1 | awk -v s="$RANDOM" '{ srand(s); print $(1 + int(rand() * 3)) }')
      if [ $((RANDOM % 2)) = 0 ]; then target=$mpirun_pid; else target=$(ranks_of "$mpirun_pid"); fi
      # mpirun passes SIGTERM and SIGINT on; SIGUSR1 it does not take from the user.
      [ "$signal" = USR1 ] && target=$(ranks_of "$mpirun_pid")
      kill -"$signal" $target 2>/dev/null || true
      ;;
    one_rank)
      wait_for_training "$log"
      rank1=
      for pid in $(ranks_of "$mpirun_pid"); do
        tr '\0' '\n' <"/proc/$pid/environ" | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$pid
      done
      [ -n "$rank1" ] || fail "try $try: no process of rank 1 under mpirun"
      kill -TERM "$rank1"
      ;;
    *) fail "unknown mode $mode" ;;
  esac
  set +e
  wait "$job"
  rc=$?
  set -e
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { cat "$log"; fail "try $try: the run hung after the signal"; }
  if grep -Eq "$crash_pattern" "$log"; then
    cat "$log"
    fail "try $try ($mode): a rank crashed after a stop signal"
  fi
  if grep -q "^done: .*checkpoint " "$log"; then
    checkpoint=$(sed -n 's/^done: .*checkpoint //p' "$log")
    [ -s "$checkpoint" ] || { cat "$log"; fail "try $try: the final checkpoint '$checkpoint' is not there"; }
    grep -q "stopped by signal" "$log" || { cat "$log"; fail "try $try: done without saying it was stopped"; }
    "$MGTRAIN" compare "$checkpoint" "$checkpoint" >/dev/null || fail "try $try: the final checkpoint does not load"
  elif [ "$expect_checkpoint" = 1 ] && grep -q "^training " "$log"; then
    cat "$log"
    fail "try $try ($mode): stopped during training (rc $rc) without a final checkpoint"
  fi
  if [ "$mode" = one_rank ]; then
    grep -q "stopped by signal 15 at step" "$log" || { cat "$log"; fail "try $try: the log does not name rank 1's SIGTERM"; }
  fi
  echo "try $try ($mode): rc $rc, $(grep -o 'stopped by signal [0-9]* at step [0-9]*' "$log" || echo 'ended before training')"
done
