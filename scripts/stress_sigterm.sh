#!/usr/bin/env bash
# SIGTERM to mpirun at a random step, at length: tests/e2e/sigterm_mpirun.sh (which CI runs 3
# times for each model) run RUNS times for the MLP and for a gpt, np=2, against a build
# directory. Prints each run and, per model, how many stopped with a final checkpoint, finished
# first, were lost (training had started, and there is no final checkpoint or no done: line) or
# printed done: twice, and mpirun's exit statuses; exits non-zero on any lost run.
# Usage: scripts/stress_sigterm.sh [RUNS (default 25)] [BUILD_DIR (default build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-25}
MGTRAIN_BUILD=$(cd "${2:-$here/../build}" && pwd)
source "$here/env.sh"
export MGTRAIN=$MGTRAIN_BUILD/bin/mgtrain DATA_DIR=$MGTRAIN_BUILD/test-data/fashion-mnist
[ -x "$MGTRAIN" ] || { echo "no launcher at $MGTRAIN: build first" >&2; exit 2; }
MGTRAIN=$MGTRAIN bash "$MGTRAIN_ROOT/tests/e2e/prepare_data.sh"
failed=0 summary=()
for model in mlp gpt; do
  export WORK=$MGTRAIN_BUILD/test-work/stress_sigterm/$model
  bash "$MGTRAIN_ROOT/tests/e2e/sigterm_mpirun.sh" "$model" "$runs" 2>&1 | tee "$MGTRAIN_BUILD/test-work/stress_sigterm-$model.log" ||
    failed=1
  summary+=("$(grep '^sigterm to mpirun' "$MGTRAIN_BUILD/test-work/stress_sigterm-$model.log" || echo "$model: no summary")")
done
printf '%s\n' "${summary[@]}"
[ "$failed" = 0 ]
