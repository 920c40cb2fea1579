#!/usr/bin/env bash
# Builds mgtrain with AddressSanitizer and UndefinedBehaviorSanitizer in build-sanitize/ and runs
# the unit and MPI tests there. Any sanitizer report fails its test; any failure exits non-zero.
# Extra arguments go to ctest (e.g. -R checkpoint).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/install_deps.sh"
# Its own build directory: sanitized plugins only load into sanitized executables.
MGTRAIN_BUILD=$(cd "$here/.." && pwd)/build-sanitize
source "$here/env.sh"

# Set before the build too: gtest_discover_tests runs the test executables to list their tests.
# halt_on_error, abort_on_error=0: stop at the first report with a plain non-zero exit, which mpirun
# passes on. fast_unwind_on_malloc=0: Open MPI, PMIx and HDF5 are built without frame pointers, so
# only the slower unwinder gives allocation stacks that reach their libraries (lsan.supp matches on
# those); the tests take about 1.7x as long with it.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=${MGTRAIN_DETECT_LEAKS:-1}:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:report_error_type=1
# Leaks are checked in every process, MPI ranks included (the ranks inherit this environment from
# mpirun). Open MPI and PMIx keep what MPI_Init allocates past MPI_Finalize; lsan.supp names those
# libraries only, never mgtrain code. LeakSanitizer needs ptrace on its own threads: where a
# container forbids that, run with MGTRAIN_DETECT_LEAKS=0.
export LSAN_OPTIONS=suppressions=$here/lsan.supp:print_suppressions=0

# The host code only: the sanitizers do not instrument CUDA device code, and nvcc would double
# the build time.
mgtrain_build RelWithDebInfo -DMGTRAIN_BUILD_TESTS=ON -DMGTRAIN_SANITIZE=address,undefined -DMGTRAIN_CUDA=OFF
cd "$MGTRAIN_BUILD"
ctest -L 'unit|mpi' --output-on-failure --timeout 900 "$@"
