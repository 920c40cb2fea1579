#!/usr/bin/env bash
# Runs test_watchdog at np=2: the job must end non-zero well before rank 1 wakes (60 s), and the
# message must name rank 0's wait.
set -u
start=$(date +%s)
timeout --kill-after=5 50 mpirun -np 2 --oversubscribe "$1" 2>err.log
rc=$?
elapsed=$(( $(date +%s) - start ))
cat err.log
echo "exit $rc after ${elapsed}s"
[ $rc -ne 0 ] || { echo "FAIL: exit 0"; exit 1; }
[ $rc -ne 124 ] && [ $rc -ne 137 ] || { echo "FAIL: the job hung until the outer limit"; exit 1; }
[ $elapsed -le 20 ] || { echo "FAIL: took ${elapsed}s for a 1 s deadline"; exit 1; }
grep -q "mgtrain: error: \[rank 0\] timed out after 1 s at step 5 in barrier" err.log || { echo "FAIL: message"; exit 1; }
# The roll call at the deadline names the rank that never came.
grep -q "waiting for rank 1, which never reached it" err.log || { echo "FAIL: the message does not name rank 1"; exit 1; }
# ... and the node it runs on, so that a lost node shows as such in a job across nodes.
grep -q "waiting for rank 1, which never reached it: stuck or gone; on node $(hostname) " err.log ||
  { echo "FAIL: the message does not name rank 1's node $(hostname)"; exit 1; }
