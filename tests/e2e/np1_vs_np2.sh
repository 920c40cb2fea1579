#!/usr/bin/env bash
# np=1 and np=2 at the same global batch reach the same test accuracy within 0.5 points.
source "$(dirname "$0")/lib.sh"
write_config run.ini
acc() {
  run_np "$1" 900 train --config run.ini --train.epochs=2 --checkpoint.dir="$WORK/np$1" --json >np$1.log 2>&1 || { cat np$1.log; fail "np=$1 failed"; }
  "$MGTRAIN" eval --checkpoint "$(grep '^{' np$1.log | tail -n 1 | json_field checkpoint)" \
    --data "$DATA_DIR/test.h5" --json | json_field accuracy
}
a1=$(acc 1) a2=$(acc 2)
echo "test accuracy: np=1 $a1, np=2 $a2"
awk -v a="$a1" -v b="$a2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }' || fail "differ by more than 0.5 points"
awk -v a="$a1" 'BEGIN { exit !(a >= 0.80) }' || fail "np=1 did not learn (accuracy $a1)"
