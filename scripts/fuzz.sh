#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan) in build-fuzz and runs each for
# DURATION seconds:
#   scripts/fuzz.sh [DURATION] [TARGET...]     default: 300 s, fuzz_config and fuzz_dataset_inspect
# Logs go to build-fuzz/fuzz-logs/<target>.log, the growing corpus to build-fuzz/fuzz-corpus/<target>
# (kept between runs; delete it to start from the seeds again), inputs that crash, leak, time out
# or run out of memory to build-fuzz/fuzz-crashes/<target>/, and the triage of those inputs (where
# each fault is, with a stack) to build-fuzz/fuzz-logs/<target>.triage.txt. Exits non-zero when any
# input was saved (1: a fault in mgtrain, 3: faults inside libhdf5 only). MGTRAIN_FUZZ_JOBS sets the
# build parallelism (default 1).
# MGTRAIN_FUZZ_HDF5 chooses the libhdf5 the dataset inspector runs on:
#   system (default)  the system's libhdf5 (Debian 12: 1.10.8, uninstrumented).
#   1.14.5            built from Debian trixie's source by tests/fuzz/build_hdf5.sh into
#                     build-fuzz/hdf5/1.14.5-fuzz, static, with the same sanitizers and libFuzzer
#                     coverage; downloaded (36.8 MB, checksums checked) and built (about 6 minutes
#                     at -j1) on the first run, reused afterwards.
# Both have faults of their own on malformed files (tests/fuzz/README.md), so fuzz_dataset_inspect
# runs in fork mode and keeps going after each; MGTRAIN_FUZZ_FORK=0 runs it in-process instead
# (it stops at the first fault).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${MGTRAIN_FUZZ_BUILD:-$root/build-fuzz}
duration=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_dataset_inspect)
case $duration in ''|*[!0-9]*) echo "usage: $0 [DURATION_SECONDS] [TARGET...]" >&2; exit 2 ;; esac

"$here/install_deps.sh"
# clang with libFuzzer and the sanitizer runtimes; libomp because the project needs OpenMP, which
# clang takes from LLVM's runtime rather than GCC's.
fuzz_packages=(clang libclang-rt-dev libomp-dev llvm)
missing=()
for p in "${fuzz_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

hdf5=${MGTRAIN_FUZZ_HDF5:-system}
fork=${MGTRAIN_FUZZ_FORK:-1}
case $hdf5 in
  system) hdf5_args=() ;;
  1.14.5|1.14)
    hdf5=1.14.5
    hdf5_prefix=$("$root/tests/fuzz/build_hdf5.sh" "$build/hdf5" fuzz)
    # FindHDF5 takes the installed hdf5-config.cmake under HDF5_ROOT (and nothing else there).
    hdf5_args=(-DHDF5_ROOT="$hdf5_prefix" -DHDF5_USE_STATIC_LIBRARIES=ON) ;;
  *) echo "MGTRAIN_FUZZ_HDF5 must be 1.14.5 or system, not '$hdf5'" >&2; exit 2 ;;
esac
# -U first: what FindHDF5 cached for the other libhdf5 must not survive a switch between them.
cmake -U 'HDF5_*' -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMGTRAIN_CUDA=OFF \
  -DMGTRAIN_BUILD_TESTS=ON -DMGTRAIN_FUZZ=ON "${hdf5_args[@]}" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
echo "libhdf5: $(grep -E '^HDF5_(DIR|C_LIBRARY_hdf5|C_LIBRARY):' "$build/CMakeCache.txt" | head -1 | cut -d= -f2-)"
# Only the fuzzers and the seed writer: they compile the few sources they test themselves.
cmake --build "$build" -j "${MGTRAIN_FUZZ_JOBS:-1}" --target fuzz_config fuzz_dataset_inspect fuzz_make_seeds

logs=$build/fuzz-logs
mkdir -p "$logs"
seeds=$build/fuzz-seeds/dataset_inspect
rm -rf "$seeds" && mkdir -p "$seeds"
"$build/fuzz/fuzz_make_seeds" "$seeds"

# allocator_may_return_null: malloc of an impossible size (a corrupt length field that libhdf5 trusts)
# returns NULL, as glibc's does in a real run, and libhdf5 reports the failure; operator new in
# mgtrain's own code still reports such a request as a finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
command -v llvm-symbolizer >/dev/null && export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer)

# Exit status: 1 when a target found a fault in mgtrain (or one triage cannot place), else 3 when
# the only faults are inside libhdf5, else 0.
status=0
for t in "${targets[@]}"; do
  lsan= mode=()
  case $t in
    fuzz_config) max_len=4096; dict=$root/tests/fuzz/config.dict
                 inputs=("$root/tests/fuzz/corpus/config" "$root/examples") ;;
    # Seeds are 2-15 KiB (the smallest HDF5 file with two datasets is about 2 KiB). libhdf5 (1.10.8
    # and 1.14.5) itself overruns buffers or loops on some malformed files (tests/fuzz/README.md),
    # so this target runs in fork mode: a child that crashes is replaced, the input is saved and the
    # run goes on for its full duration; triage then sorts every saved input by where the fault is.
    # lsan.supp says which leaks inside libhdf5 are not counted, and why.
    fuzz_dataset_inspect) max_len=16384; dict=$root/tests/fuzz/hdf5.dict
                          inputs=("$root/tests/fuzz/corpus/dataset_inspect" "$seeds")
                          lsan=suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0
                          [ "$fork" = 1 ] && mode=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
                          # libhdf5 1.14.5 mallocs a metadata-cache entry of the size a header
                          # claims (2-4 GiB, say) before it checks that size against the end of the
                          # file and refuses it; the pages are never touched (a plain build stays
                          # at 13 MB). There a single malloc is limited only by ASan (1 TiB, above
                          # that NULL and an HDF5 error); memory actually used is still limited
                          # by -rss_limit_mb.
                          [ "$hdf5" = system ] || mode+=(-malloc_limit_mb=1048576) ;;
    *) echo "unknown target '$t'" >&2; exit 2 ;;
  esac
  corpus=$build/fuzz-corpus/$t
  crashes=$build/fuzz-crashes/$t
  # This run's findings only: the previous run's are kept beside them.
  if [ -d "$crashes" ]; then rm -rf "$crashes.prev" && mv "$crashes" "$crashes.prev"; fi
  mkdir -p "$corpus" "$crashes"
  log=$logs/$t.log
  echo "== $t: ${duration}s, log $log"
  rc=0
  # -timeout: one input taking 10 s is a finding (a hang); -rss_limit_mb (also the limit of a
  # single malloc) turns an input that makes the code allocate gigabytes into a reported finding.
  LSAN_OPTIONS=${LSAN_OPTIONS:-$lsan} "$build/fuzz/$t" "$corpus" "${inputs[@]}" -dict="$dict" \
    -max_len=$max_len -max_total_time="$duration" -timeout=10 -rss_limit_mb=2048 "${mode[@]}" \
    -print_final_stats=1 -artifact_prefix="$crashes/" >"$log" 2>&1 || rc=$?
  # The summary: in-process, the last coverage line, the statistics and "Done N runs in T
  # second(s)"; in fork mode, the last status line (with its oom/timeout/crash counts).
  grep -E '^#[0-9]+\s+DONE|^stat::|^Done [0-9]+ runs' "$log" || grep -E '^#[0-9]+: cov:' "$log" | tail -1 || true
  if [ -n "$(ls -A "$crashes")" ]; then
    trc=0
    LSAN_OPTIONS=${LSAN_OPTIONS:-$lsan} python3 "$root/tests/fuzz/triage.py" "$build/fuzz/$t" "$crashes" \
      "$root" "$logs/$t.triage.txt" || trc=$?
    if [ $trc -eq 3 ]; then
      echo "$t: faults inside libhdf5 only, see $logs/$t.triage.txt"
      [ $status -eq 0 ] && status=3
    else
      echo "$t FAILED: see $logs/$t.triage.txt, $log and $crashes/"
      status=1
    fi
  elif [ $rc -ne 0 ]; then
    echo "$t FAILED (exit $rc, nothing saved): see $log"
    status=1
  fi
done
exit $status
