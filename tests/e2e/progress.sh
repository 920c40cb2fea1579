#!/usr/bin/env bash
# Rank 0's live bar on a terminal (a pseudo-terminal from script(1)), under mpirun -np 2.
# Usage: progress.sh CASE
#   max_steps  train.max_steps = 300 of 468 steps an epoch, train.epochs = 10: the bar counts the
#              epoch and the 300 steps the run takes (epoch 1/1 ... 300/300), not 1/10 and 300/468
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
  *) fail "unknown case $1" ;;
esac
echo PASS
