#!/usr/bin/env bash
# mgtrain under a real one-node Slurm: both example batch scripts submitted with `sbatch --wait`
# (job exit code, log, checkpoint in runs/<job id>), then scancel of a running job (a final
# checkpoint, then a resubmission with --resume latest that finishes the run). Every daemon the
# test started is stopped at the end.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/../slurm/cluster.sh"
# slurmd must run as root to start jobs as their user; CI and scripts/test.sh under sudo are root.
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the Slurm test starts slurmd and munged, which need root"; exit 77; }
trap cluster_stop EXIT
cluster_start "$WORK/cluster" || fail "could not bring up the test cluster"
write_config run.ini
export MGTRAIN CONFIG=run.ini

for style in mpirun srun; do
  out=$(sbatch --parsable --wait --chdir="$WORK" --output="$WORK/$style-%j.log" \
    "$EXAMPLES/slurm/train_$style.sbatch" --train.max_steps=30 --train.log_every=10 --checkpoint.dir="runs/%j") ||
    { cat "$WORK"/$style-*.log; fail "sbatch --wait of the $style example failed"; }
  job=${out%%;*}
  log="$WORK/$style-$job.log"
  echo "== $style: job $job"; tail -n 3 "$log"
  grep -q "^done: 30 steps" "$log" || fail "$style: the log does not end with the run's summary"
  [ -f "$WORK/runs/$job/step-30.h5" ] || fail "$style: no checkpoint in runs/$job (checkpoint.dir = runs/%j)"
  [ "$(grep -c '^mgtrain [0-9][0-9.]*: ' "$log")" -eq 1 ] || fail "$style: expected one rank-0 banner (ranks not told apart?)"
done

# scancel of a running job: SIGTERM to every rank, a final checkpoint, then resubmit to finish.
# The job could train for days (100000 epochs), so the cancel finds it training on any machine,
# however fast or loaded (one of 40 epochs could end before the cancel reached it).
job=$(sbatch --parsable --chdir="$WORK" --output="$WORK/long-%j.log" "$EXAMPLES/slurm/train_srun.sbatch" \
  --checkpoint.dir="$WORK/long" --train.epochs=100000 --train.log_every=50)
cluster_cancel_when_training "$job" "$WORK/long" ||
  { cat "$WORK"/long-*.log; fail "the long job never started training"; }
log="$WORK/long-$job.log"
echo "== cancelled job $job"; tail -n 4 "$log"
grep -q "stopped by signal 15 at step" "$log" || fail "the cancelled job did not stop cleanly"
stopped_at=$(sed -n 's/.*stopped by signal 15 at step \([0-9]*\).*/\1/p' "$log")
[ "$(cat "$WORK/long/latest")" = "step-$stopped_at.h5" ] || fail "latest does not name the final checkpoint step-$stopped_at.h5"

out=$(sbatch --parsable --wait --chdir="$WORK" --output="$WORK/resume-%j.log" "$EXAMPLES/slurm/train_srun.sbatch" \
  --checkpoint.dir="$WORK/long" --train.epochs=100000 --train.log_every=50 --train.max_steps=$((stopped_at + 40)) \
  --resume latest) || { cat "$WORK"/resume-*.log; fail "the resubmitted job failed"; }
log="$WORK/resume-${out%%;*}.log"
tail -n 2 "$log"
grep -q "resumed from step $stopped_at" "$log" || fail "the resubmission did not resume from step $stopped_at"
[ -f "$WORK/long/step-$((stopped_at + 40)).h5" ] || fail "the resumed run wrote no final checkpoint"
