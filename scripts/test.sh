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
ctest --output-on-failure --timeout 900 "$@"
