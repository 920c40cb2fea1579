#!/usr/bin/env bash
# Runs test_watchdog roll_call at np=3: ranks 0 and 1 wait in collectives of two communicators when
# a stop signal comes; each names rank 2 alone (the other answered its roll call), then the
# deadline ends the job naming rank 2 again.
set -u
timeout --kill-after=5 50 mpirun -np 3 --oversubscribe "$1" roll_call 2>err.log
rc=$?
cat err.log
echo "exit $rc"
[ $rc -ne 0 ] || { echo "FAIL: exit 0"; exit 1; }
[ $rc -ne 124 ] && [ $rc -ne 137 ] || { echo "FAIL: the job hung until the outer limit"; exit 1; }
for rank in 0 1; do
  grep -q "mgtrain: \[rank $rank\] signal 15 came after [0-9]* s waiting at step 5 in barrier for rank 2, which did not answer a roll call" err.log ||
    { echo "FAIL: rank $rank's line on the signal does not name rank 2 alone"; exit 1; }
done
grep -q "timed out after 8 s at step 5 in barrier, waiting for rank 2, which never reached it" err.log ||
  { echo "FAIL: the deadline's line does not name rank 2 alone"; exit 1; }
