#!/usr/bin/env bash
# The GPU checks, on a machine with a GPU that has the CUDA, cuDNN and NCCL pip wheels (Python
# 3.12, as PyTorch installs them) but not this project's other dependencies (Open MPI, HDF5,
# Boost, oneDNN). It unpacks the bundle scripts/pack-device-libs.sh makes from a CUDA build
# (binaries, their non-CUDA libraries, Open MPI's components), finds the CUDA libraries in the
# wheels, then runs every GPU test binary and `mgtrain doctor` as one rank (an Open MPI singleton:
# no mpirun there). On a GPU machine no test may skip. Logs and gtest XML go to $OUT (default
# ./device-check-out). Written on a machine without a GPU, so never run there: keep it simple.
# Usage: scripts/device-check.sh [BUNDLE.tar.xz]   (default build-gpu/device-bundle.tar.xz)
set -uo pipefail
bundle=${1:-build-gpu/device-bundle.tar.xz}
out=${OUT:-$PWD/device-check-out}
mkdir -p "$out"
[[ -f $bundle ]] || { echo "no bundle $bundle: run scripts/pack-device-libs.sh on the build machine" >&2; exit 1; }
work=$(mktemp -d)
tar -xJf "$bundle" -C "$work" || exit 1
root=$work/device-bundle
failures=()
fail() { echo "FAIL: $*"; failures+=("$*"); }

echo "== machine"
ldd --version 2>&1 | head -1
echo "glibc the bundle needs: up to GLIBC_2.36 (it was built on Debian 12)"
command -v nvidia-smi >/dev/null && nvidia-smi 2>&1 | tee "$out/nvidia-smi.log" | head -15

# The CUDA libraries of the wheels: every directory under an nvidia/ package that holds one.
for python in python3.12 python3; do "$python" -c pass 2>/dev/null && break; done
sites=$("$python" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))')
cuda_dirs=$(for s in $sites; do [[ -d $s/nvidia ]] && find "$s/nvidia" -name 'lib*.so*' -printf '%h\n'; done | sort -u)
echo "== CUDA libraries from the wheels ($python)"
for d in $cuda_dirs; do echo "  $d: $(cd "$d" && ls | grep -E '^lib(cudart|cublas|cudnn|nccl)\.so' | tr '\n' ' ')"; done
[[ -n $cuda_dirs ]] || fail "no nvidia/*/lib directories in $sites"

export LD_LIBRARY_PATH=$root/lib:$root/openmpi/lib:$(echo "$cuda_dirs" | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing() { for f in "$root"/bin/* "$root"/lib/libmgtrain.so.*; do ldd "$f" 2>&1 | grep 'not found'; done | sort -u; }
if missing | grep -q 'GLIBCXX\|CXXABI\|GCC_\|GOMP_\|libstdc++\|libgcc_s\|libgomp'; then
  echo "the system's GCC runtime is older than the build's: using the bundle's"
  export LD_LIBRARY_PATH=$root/gcc:$LD_LIBRARY_PATH
fi
if [[ -n $(missing) ]]; then
  missing | tee "$out/missing-libraries.log"
  fail "libraries not found (CUDA ones must come from the wheels: the build used CUDA 13, cuDNN 9, NCCL 2)"
fi

# Open MPI, relocated to the bundle, as a singleton (no mpirun, no daemon).
export OPAL_PREFIX=$root/openmpi OPAL_LIBDIR=$root/openmpi/lib OPAL_PKGLIBDIR=$root/openmpi/lib/openmpi3
export OPAL_DATAROOTDIR=$root/openmpi/share OPAL_DATADIR=$root/openmpi/share
export OPAL_PKGDATADIR=$root/openmpi/share OPAL_SYSCONFDIR=$root/openmpi/etc
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# hwloc's optional plugins (X11, OpenCL, PCI) are not in the bundle; do not look for them.
mkdir -p "$work/no-hwloc-plugins"
export HWLOC_PLUGINS_PATH=$work/no-hwloc-plugins
export MGTRAIN_TEST_PLUGIN_DIR=$root/plugins

for test in "$root"/bin/gpu_*; do
  name=$(basename "$test")
  echo "== $name"
  timeout --kill-after=10 300 "$test" --gtest_output="xml:$out/$name.xml" >"$out/$name.log" 2>&1
  rc=$?
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^  .*elements differ|Skipped|Failure|error' "$out/$name.log" | head -150
  [[ $rc -eq 0 ]] || fail "$name exited $rc (log $out/$name.log)"
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$out/$name.log")
  [[ $skipped -eq 0 ]] || fail "$name skipped $skipped test(s) on a machine with a GPU"
done

echo "== mgtrain doctor (one rank)"
timeout --kill-after=10 120 "$root/bin/mgtrain" doctor >"$out/doctor.log" 2>&1
rc=$?
cat "$out/doctor.log"
[[ $rc -eq 0 ]] || fail "mgtrain doctor exited $rc"
grep -qE '^0 +[^ ]+ +0/1 +0: ' "$out/doctor.log" || fail "doctor's row for rank 0 shows no GPU"
! grep -q 'CPU fallback' "$out/doctor.log" || fail "doctor fell back to the CPU on a machine with a GPU"

rm -rf "$work"
echo "== summary"
if [[ ${#failures[@]} -eq 0 ]]; then
  echo "device check PASSED"
else
  printf '  %s\n' "${failures[@]}"
  echo "device check FAILED (${#failures[@]})"
  exit 1
fi
