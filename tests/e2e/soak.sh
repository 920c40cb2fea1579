#!/usr/bin/env bash
# Soak: 3000 steps of the MLP at np=4 (oversubscribed) with a checkpoint every 100 steps. The
# largest rank's resident memory at the end must be within 5% of its value at step 300, and the
# open file descriptors must not change from step 300 on (metrics.jsonl: rss_mb, open_fds).
source "$(dirname "$0")/lib.sh"
write_config run.ini "[train]" "epochs = 7" "max_steps = 3000" "log_every = 100" "progress = lines" \
  "[checkpoint]" "every_steps = 100" "keep = 3"
run_np 4 900 train --config run.ini >run.log 2>&1 || { cat run.log; fail "the run failed"; }
metrics=ckpt/metrics.jsonl
field() {  # field NAME STEP
  grep "^{\"step\":$2," "$metrics" | json_field "$1"
}
rss300=$(field rss_mb 300) rss_end=$(field rss_mb 3000)
fds300=$(field open_fds 300)
echo "rss_mb: step 300 $rss300, step 3000 $rss_end; open_fds at step 300: $fds300"
grep -o '"step":[0-9]*\|"rss_mb":[0-9.]*\|"open_fds":[0-9]*' "$metrics" | paste - - - | tail -30
[ -n "$rss300" ] && [ -n "$rss_end" ] && [ -n "$fds300" ] || fail "metrics.jsonl lacks rss_mb or open_fds"
awk -v a="$rss300" -v b="$rss_end" 'BEGIN { exit !(b <= a * 1.05 && b >= a * 0.95) }' ||
  fail "resident memory went from $rss300 MB at step 300 to $rss_end MB at step 3000 (more than 5%)"
for step in $(seq 300 100 3000); do
  fds=$(field open_fds "$step")
  [ "$fds" = "$fds300" ] || fail "open file descriptors: $fds300 at step 300, $fds at step $step"
done
[ "$(ls ckpt/step-*.h5 | wc -l)" = 3 ] || fail "checkpoint.keep = 3 kept $(ls ckpt/step-*.h5 | wc -l) files"
echo PASS
