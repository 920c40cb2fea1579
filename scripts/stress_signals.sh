#!/usr/bin/env bash
# Stop signals at random moments, at length: tests/e2e/stop_signals.sh (which CI runs a few times
# in each mode) repeated TRIES times over its three modes, against a build directory: the Release
# build, or build-sanitize (scripts/sanitize.sh) to run the ranks under AddressSanitizer and
# UndefinedBehaviorSanitizer. Prints each try and a count; exits non-zero on any crash, hang or
# missing final checkpoint.
# Usage: scripts/stress_signals.sh [TRIES (default 50)] [BUILD_DIR (default build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tries=${1:-50}
MGTRAIN_BUILD=$(cd "${2:-$here/../build}" && pwd)
source "$here/env.sh"
export MGTRAIN=$MGTRAIN_BUILD/bin/mgtrain DATA_DIR=$MGTRAIN_BUILD/test-data/fashion-mnist
[ -x "$MGTRAIN" ] || { echo "no launcher at $MGTRAIN: build first" >&2; exit 2; }
MGTRAIN=$MGTRAIN bash "$MGTRAIN_ROOT/tests/e2e/prepare_data.sh"
# The sanitizers stop a rank at its first report, which the test then finds in the log.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=0
for try in $(seq "$tries"); do
  mode=$(echo burst mpirun random random | awk -v t="$try" '{ print $(1 + t % 4) }')
  export WORK=$MGTRAIN_BUILD/test-work/stress_signals/$try
  if out=$(bash "$MGTRAIN_ROOT/tests/e2e/stop_signals.sh" "$mode" 1 2>&1); then
    echo "$(tail -1 <<<"$out")" | sed "s/^try 1/try $try/"
    rm -rf "$WORK"
  else
    failed=$((failed + 1))
    echo "try $try ($mode) FAILED, kept in $WORK:"
    tail -20 <<<"$out"
  fi
done
echo "stop signals: $((tries - failed)) passed, $failed failed"
[ "$failed" = 0 ]
