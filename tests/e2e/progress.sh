#!/usr/bin/env bash
# Rank 0's live bar on a terminal (a pseudo-terminal from script(1)), under mpirun -np 2.
# Usage: progress.sh CASE
#   max_steps  train.max_steps = 300 of 468 steps an epoch, train.epochs = 10: the bar counts the
#              epoch and the 300 steps the run takes (epoch 1/1 ... 300/300), not 1/10 and 300/468
#   warnings   rank 1 slowed (MGTRAIN_TEST_SLOW_RANK): the slow-rank warning, printed while the bar
#              is drawn, starts a line of its own, and the bar is drawn again below it
#   final_error a NaN gradient ends the run while the bar is drawn: the error starts a line of its own
source "$(dirname "$0")/lib.sh"
command -v script >/dev/null || { echo "SKIP: no script(1) (bsdutils) to give the run a terminal"; exit 77; }
write_config run.ini "[train]" "epochs = 10" "log_every = 100" "progress = auto"

# Trains under a pseudo-terminal; the terminal's bytes, carriage returns and all, go to LOG.
on_terminal() {  # on_terminal LOG ARGS...
  local log=$1; shift
  timeout --kill-after=10 300 script -qec "mpirun -np 2 --oversubscribe $MGTRAIN train --config run.ini $*" /dev/null \
    >"$log" 2>&1 || { cat -v "$log"; fail "training on a terminal failed"; }
  grep -q "done: " "$log" || { cat -v "$log"; fail "no done: line"; }
}

# The terminal's lines as drawn: each piece between carriage returns and line breaks.
pieces() { tr '\r' '\n' <"$1" | sed '/^ *$/d'; }

case $1 in
  max_steps)
    on_terminal run.log --train.max_steps=300
    drawn=$(pieces run.log)
    grep '^epoch ' <<<"$drawn" | tail -3
    grep -q '^epoch 1/1 \[##############################\] 300/300 ' <<<"$drawn" ||
      fail "the bar does not end at epoch 1/1, 300/300"
    ! grep -q '^epoch [0-9]*/10 \|/468 ' <<<"$drawn" || fail "the bar counts 10 epochs of 468 steps"
    ;;
  warnings)
    MGTRAIN_TEST_SLOW_RANK=1:15 on_terminal run.log --train.max_steps=300
    drawn=$(pieces run.log)
    grep -q "^warning: rank 1's step time" <<<"$drawn" || { cat -v run.log; fail "no slow-rank warning on a line of its own"; }
    # Every warning starts its line: nothing of the bar before it on the terminal's line.
    inside=$(grep -v '^warning: ' <<<"$drawn" | grep 'warning: ' || true)
    [ -z "$inside" ] || { echo "$inside"; fail "a warning landed in the middle of the bar's line"; }
    # The bar is drawn again after each warning.
    awk '/^warning: / { w = 1; next } w && /^epoch / { ok++; w = 0 } w && !/^epoch / { exit 1 }
      END { exit !(ok > 0) }' <<<"$drawn" || { cat -v run.log; fail "the bar is not drawn again after a warning"; }
    ;;
  final_error)
    # A run that ends with an error while the bar is drawn (a NaN in rank 0's gradient at step 150).
    rc=0
    MGTRAIN_TEST_NAN_AT=0:150 timeout --kill-after=10 300 script -qec \
      "mpirun -np 2 --oversubscribe $MGTRAIN train --config run.ini --train.max_steps=300" /dev/null >run.log 2>&1 || rc=$?
    drawn=$(pieces run.log)
    grep -q '^mgtrain: error: \[rank 0\] non-finite gradient at step 150' <<<"$drawn" ||
      { cat -v run.log; fail "the error line does not start a line of its own"; }
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
