#!/usr/bin/env bash
# Installs what is missing, checks the sources' format, builds, and runs every test with ctest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/install_deps.sh"
"$here/check_format.sh"
source "$here/env.sh"
mgtrain_build Release -DMGTRAIN_BUILD_TESTS=ON
cd "$MGTRAIN_BUILD"
# MPI tests oversubscribe the cores, so run tests one at a time to keep timings sane.
rc=0
ctest --output-on-failure --timeout 900 "$@" || rc=$?
# ctest lists a test that skipped (exit 77: the machine lacks what it needs) without the reason:
# each one's SKIP line from the log.
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 } /^SKIP: / { sub(/^SKIP: /, ""); print "skipped " name ": " $0 }' \
  Testing/Temporary/LastTest.log 2>/dev/null || true
exit "$rc"
