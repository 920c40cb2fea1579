#!/usr/bin/env bash
# The GPU checks, on a machine with a GPU that has the CUDA, cuDNN and NCCL pip wheels (Python
# 3.12, as PyTorch installs them) but not this project's other dependencies (Open MPI, HDF5,
# Boost, oneDNN). It unpacks the bundle scripts/pack-device-libs.sh makes from a CUDA build
# (binaries, their non-CUDA libraries, Open MPI's components), finds the CUDA libraries in the
# wheels, then runs every GPU test binary and `mgtrain doctor` as one rank (an Open MPI singleton:
# no mpirun there; NCCL's test runs there at one rank), the CPU-against-GPU parity of 50 MLP steps,
# sync.deterministic on the GPU (its host-side reduction), sync.name = zero refused on the GPU,
# the GPU benchmark against PyTorch eager (installed there), and the out-of-memory handling. On a
# GPU machine no test may skip. Logs and gtest XML go to one archive, $OUT/device-check-logs.tar.gz
# ($OUT defaults to ./device-check-out), since few files come back from such a machine; stdout is
# the summary. Written on a machine without a GPU, so never run there: keep it simple.
# Usage: scripts/device-check.sh [BUNDLE.tar.xz]   (default build-gpu/device-bundle.tar.xz)
set -uo pipefail
bundle=${1:-build-gpu/device-bundle.tar.xz}
archive_dir=${OUT:-$PWD/device-check-out}
mkdir -p "$archive_dir"
[[ -f $bundle ]] || { echo "no bundle $bundle: run scripts/pack-device-libs.sh on the build machine" >&2; exit 1; }
work=$(mktemp -d)
# The logs go into the archive however the script ends: a run cut short by the caller's time limit
# (SIGTERM) still brings back what it logged so far.
archive() {
  [[ -d $work ]] || return 0
  tar -czf "$archive_dir/device-check-logs.tar.gz" -C "$work" logs 2>/dev/null
  rm -rf "$work"
}
trap archive EXIT
# Each command runs in the background under `limited`, so that a SIGTERM is handled at once (bash
# runs a trap only once the foreground command ends) and passed on to it.
child=
trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null
      echo "device check cut short (SIGTERM): logs so far in $archive_dir/device-check-logs.tar.gz"; exit 143' TERM
limited() {  # limited SECONDS COMMAND...: the command under timeout, its exit status returned
  timeout --kill-after=10 "$@" &
  child=$!
  wait "$child"
  local rc=$?
  child=
  return $rc
}
out=$work/logs
mkdir -p "$out"
tar -xJf "$bundle" -C "$work" || exit 1
root=$work/device-bundle
failures=()
fail() { echo "FAIL: $*"; failures+=("$*"); }
# The first error lines of a run's log, so stdout says why without the archive.
why() { grep -m 3 -E 'mgtrain: error|Error|error:' "$out/$1" | sed 's/^/    /'; }

echo "== machine"
ldd --version 2>&1 | head -1
echo "glibc the bundle needs: up to GLIBC_2.36 (it was built on Debian 12)"
command -v nvidia-smi >/dev/null && nvidia-smi 2>&1 | tee "$out/nvidia-smi.log" | head -15

# The CUDA libraries of the wheels: every directory under an nvidia/ package that holds one.
for python in python3.12 python3; do "$python" -c pass 2>/dev/null && break; done
sites=$("$python" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))')
cuda_dirs=$(for s in $sites; do [[ -d $s/nvidia ]] && find "$s/nvidia" -name 'lib*.so*' -not -path '*/stubs/*' -printf '%h\n'; done | sort -u)
echo "== CUDA libraries from the wheels ($python)"
for d in $cuda_dirs; do echo "  $d: $(cd "$d" && ls | grep -E '^lib(cudart|cublas|cudnn|nccl)\.so' | tr '\n' ' ')"; done
[[ -n $cuda_dirs ]] || fail "no nvidia/*/lib directories in $sites"

# Python (PyTorch) keeps the machine's own libraries: the bundle's are Debian 12's.
system_library_path=${LD_LIBRARY_PATH-}
export LD_LIBRARY_PATH=$root/lib:$root/openmpi/lib:$(echo "$cuda_dirs" | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing() { for f in "$root"/bin/* "$root"/lib/*.so* "$root"/plugins/*.so; do ldd "$f" 2>&1 | grep 'not found'; done | sort -u; }
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
# The plugins: mgtrain looks in MGTRAIN_PLUGIN_PATH (its built-in directories are the build
# machine's); one GPU test loads the optimizers from MGTRAIN_TEST_PLUGIN_DIR.
export MGTRAIN_PLUGIN_PATH=$root/plugins MGTRAIN_TEST_PLUGIN_DIR=$root/plugins
# NCCL (its one-rank test) says why when it cannot set up on this machine.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

for test in "$root"/bin/gpu_*; do
  name=$(basename "$test")
  echo "== $name"
  limited 300 "$test" --gtest_output="xml:$out/$name.xml" >"$out/$name.log" 2>&1
  rc=$?
  count() { grep -cE "^\[ +$1 +\] .* \([0-9]+ ms\)$" "$out/$name.log"; }
  echo "  $(count OK) passed, $(count FAILED) failed, $(count SKIPPED) skipped"
  # No test ran (it could not start, say): the log's first lines say why.
  [[ $(count OK) -gt 0 || $(count FAILED) -gt 0 || $(count SKIPPED) -gt 0 ]] || head -3 "$out/$name.log" | sed 's/^/    /'
  grep -E '^\[ +(FAILED|SKIPPED) +\] .* \([0-9]+ ms\)$|Failure$|^  .*elements differ' "$out/$name.log" | head -40
  [[ $rc -eq 0 ]] || fail "$name exited $rc (log $name.log)"
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$out/$name.log")
  [[ $skipped -eq 0 ]] || fail "$name skipped $skipped test(s) on a machine with a GPU"
done

echo "== mgtrain doctor (one rank)"
limited 120 "$root/bin/mgtrain" doctor >"$out/doctor.log" 2>&1
rc=$?
cat "$out/doctor.log"
[[ $rc -eq 0 ]] || fail "mgtrain doctor exited $rc"
grep -qE '^0 +[^ ]+ +0/1 +0: ' "$out/doctor.log" || fail "doctor's row for rank 0 shows no GPU"
! grep -q 'CPU fallback' "$out/doctor.log" || fail "doctor fell back to the CPU on a machine with a GPU"

# Training runs, as one rank: a config over the bundle's 10,000 images.
train_config() {  # train_config MODEL FILE
  cat >"$2" <<INI
[data]
train = $root/data/train.h5
[model]
name = $1
[optimizer]
name = sgd
lr = 0.05
momentum = 0.9
[train]
epochs = 100
global_batch = 128
seed = 42
log_every = 10
[checkpoint]
dir = $work/unused
INI
}
mgt() { limited "$1" "$root/bin/mgtrain" "${@:2}"; }
pytorch() { LD_LIBRARY_PATH=$system_library_path limited 300 "$python" "$root/bench/pytorch_gpu.py" "$@"; }
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }
train_config mlp "$work/mlp.ini"
train_config cnn "$work/cnn.ini"

echo "== parity: 50 steps of the MLP from the same seed, CPU path against GPU path (losses within 1e-3 relative)"
for run in cpu gpu gpu-again gpu-eager gpu-bf16; do
  device=${run%%-*}
  extra=()
  [[ $run == gpu-eager ]] && extra=(--gpu.cuda_graphs=false)
  [[ $run == gpu-bf16 ]] && extra=(--gpu.precision=bf16)
  mgt 300 train --config "$work/mlp.ini" --train.device="$device" --train.max_steps=50 --checkpoint.dir="$work/$run" \
    --json "${extra[@]}" >"$out/parity-$run.log" 2>&1 ||
    { fail "train.device = $device ($run) exited $? (log parity-$run.log)"; why "parity-$run.log"; }
  grep -E '^device:|^\{|warning' "$out/parity-$run.log" | sed "s/^/  $run: /"
  ! grep -q 'recording the step as a CUDA graph failed' "$out/parity-$run.log" ||
    fail "$run: the step could not be recorded as a CUDA graph (log parity-$run.log)"
done
paste -d' ' <(losses "$work/cpu/metrics.jsonl") <(losses "$work/gpu/metrics.jsonl") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r; n++;
         printf "  step %3d  cpu %.7f  gpu %.7f  relative %.2e\n", 10 * n, $1, $2, r; if (r > 1e-3) bad++ }
       END { printf "  %d losses, largest relative difference %.2e\n", n, worst; exit !(n == 5 && bad == 0) }' ||
  fail "GPU losses differ from the CPU's by more than 1e-3 relative (or are missing)"
echo "  bf16 mixed precision against the CPU's FP32 (within 3%):"
paste -d' ' <(losses "$work/cpu/metrics.jsonl") <(losses "$work/gpu-bf16/metrics.jsonl") |
  awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; n++; printf "  step %3d  cpu %.7f  bf16 %.7f  relative %.2e\n", 10 * n, $1, $2, d;
         if (d > 0.03) bad++ } END { exit !(n == 5 && bad == 0) }' || fail "bf16 losses are not within 3% of FP32's"
mgt 60 compare "$work/cpu/step-50.h5" "$work/gpu/step-50.h5" --rtol 1e-3 | tail -3
mgt 60 compare "$work/gpu/step-50.h5" "$work/gpu-again/step-50.h5" --rtol 0 | tail -1 | grep -q '^MATCH' ||
  fail "two GPU runs from the same seed differ (the GPU path must repeat bit for bit)"
mgt 60 compare "$work/gpu/step-50.h5" "$work/gpu-eager/step-50.h5" --rtol 0 | tail -1 | grep -q '^MATCH' ||
  fail "the CUDA-graph steps differ from the same steps run without graphs"

echo "== the gpt language model: 30 steps from the same seed, CPU against GPU (losses within 1e-3 relative), GPU twice bit for bit"
# With warm-up and clipping, as transformers are trained: Adam at full rate from step 0 is chaotic
# here (two CPU summation orders already end 6% apart at step 30), which no parity check survives.
cat >"$work/gpt.ini" <<INI
[data]
train = $root/data/text.h5
[model]
name = gpt
layers = 4
heads = 4
dim = 128
context = 128
[optimizer]
name = adam
lr = 0.001
clip_norm = 1.0
[train]
global_batch = 32
warmup_steps = 100
seed = 42
log_every = 10
[checkpoint]
dir = $work/unused
INI
for run in cpu gpu gpu-again gpu-eager; do
  device=${run%%-*}
  extra=()
  [[ $run == gpu-eager ]] && extra=(--gpu.cuda_graphs=false)
  mgt 300 train --config "$work/gpt.ini" --train.device="$device" --train.max_steps=30 --checkpoint.dir="$work/gpt-$run" \
    --json "${extra[@]}" >"$out/gpt-$run.log" 2>&1 ||
    { fail "gpt on $device ($run) exited $? (log gpt-$run.log)"; why "gpt-$run.log"; }
  grep -E '^device:|^\{|warning' "$out/gpt-$run.log" | sed "s/^/  gpt $run: /"
done
paste -d' ' <(losses "$work/gpt-cpu/metrics.jsonl") <(losses "$work/gpt-gpu/metrics.jsonl") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r; n++;
         printf "  step %3d  cpu %.7f  gpu %.7f  relative %.2e\n", 10 * n, $1, $2, r; if (r > 1e-3) bad++ }
       END { printf "  %d losses, largest relative difference %.2e\n", n, worst; exit !(n == 3 && bad == 0) }' ||
  fail "gpt: GPU losses differ from the CPU's by more than 1e-3 relative (or are missing)"
mgt 60 compare "$work/gpt-gpu/step-30.h5" "$work/gpt-gpu-again/step-30.h5" --rtol 0 | tail -1 | grep -q '^MATCH' ||
  fail "gpt: two GPU runs from the same seed differ"
mgt 60 compare "$work/gpt-gpu/step-30.h5" "$work/gpt-gpu-eager/step-30.h5" --rtol 0 | tail -1 | grep -q '^MATCH' ||
  fail "gpt: the CUDA-graph steps differ from the same steps without graphs"
mgt 300 bench --config "$work/gpt.ini" --train.device=gpu --steps 200 --warmup 20 --json >"$out/bench-gpt.log" 2>&1 ||
  { fail "mgtrain bench gpt exited $? (log bench-gpt.log)"; why bench-gpt.log; }
grep '^{' "$out/bench-gpt.log" | tail -1 | sed 's/^/  gpt bench: /'

echo "== sync.deterministic on the GPU (micro-shard gradients summed on the host): 4 shards as allreduce and as grad_accum, bit for bit"
for sync in allreduce grad_accum; do
  shards=(--sync.micro_shards=4)
  [[ $sync == grad_accum ]] && shards=(--sync.accum_steps=4)
  mgt 300 train --config "$work/mlp.ini" --train.device=gpu --sync.name=$sync --sync.deterministic=true "${shards[@]}" \
    --train.max_steps=20 --checkpoint.dir="$work/det-$sync" --json >"$out/det-$sync.log" 2>&1 ||
    { fail "sync.deterministic with $sync exited $? (log det-$sync.log)"; why "det-$sync.log"; }
  grep -E '^device:|^\{|warning' "$out/det-$sync.log" | sed "s/^/  $sync: /"
done
mgt 60 compare "$work/det-allreduce/step-20.h5" "$work/det-grad_accum/step-20.h5" --rtol 0 | tail -1 | grep -q '^MATCH' ||
  fail "deterministic allreduce and grad_accum over the same 4 micro-shards differ on the GPU"
paste -d' ' <(losses "$work/cpu/metrics.jsonl" | head -2) <(losses "$work/det-allreduce/metrics.jsonl") |
  awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; n++; printf "  step %3d  cpu %.7f  deterministic gpu %.7f  relative %.2e\n", 10 * n, $1, $2, d;
         if (d > 1e-3) bad++ } END { exit !(n == 2 && bad == 0) }' || fail "deterministic GPU losses are not within 1e-3 of the CPU's"

echo "== sync.name = zero (the sharded optimizer, CPU path only): train.device = gpu refused before step 1, auto on the CPU"
mgt 120 train --config "$work/mlp.ini" --train.device=gpu --sync.name=zero --train.max_steps=5 \
  --checkpoint.dir="$work/zero-gpu" >"$out/zero-gpu.log" 2>&1 && fail "sync.name = zero with train.device = gpu trained"
grep 'mgtrain: error' "$out/zero-gpu.log" | sed 's/^/  /'
[[ $(grep -c 'mgtrain: error' "$out/zero-gpu.log") -eq 1 ]] && grep 'mgtrain: error' "$out/zero-gpu.log" |
  grep -q 'sync.name = zero.*train.device = gpu' || fail "zero on the GPU: not one line naming both keys (log zero-gpu.log)"
mgt 300 train --config "$work/mlp.ini" --train.device=auto --sync.name=zero --train.max_steps=5 \
  --checkpoint.dir="$work/zero-auto" --json >"$out/zero-auto.log" 2>&1 ||
  { fail "sync.name = zero with train.device = auto exited $? (log zero-auto.log)"; why "zero-auto.log"; }
grep -q 'warning: training on the CPU (train.device = auto): sync.name = zero' "$out/zero-auto.log" ||
  fail "zero under train.device = auto did not say it trains on the CPU (log zero-auto.log)"

echo "== benchmark: samples/s on the GPU, mgtrain against PyTorch eager, batch 128 (targets: MLP 2x, CNN 1.5x)"
for model in mlp cnn; do
  mgt 300 bench --config "$work/$model.ini" --train.device=gpu --data.in_memory=true --steps 1000 --warmup 50 \
    --json >"$out/bench-$model.log" 2>&1 || { fail "mgtrain bench $model exited $? (log bench-$model.log)"; why "bench-$model.log"; }
  mgt 300 bench --config "$work/$model.ini" --train.device=gpu --data.in_memory=true --steps 1000 --warmup 50 \
    --gpu.precision=bf16 --json >"$out/bench-$model-bf16.log" 2>&1 || fail "mgtrain bench $model bf16 exited $?"
  echo "  $model bf16: $(grep '^{' "$out/bench-$model-bf16.log" | tail -1 | sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p') samples/s"
  ours=$(grep '^{' "$out/bench-$model.log" | tail -1 | sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p')
  pytorch --model "$model" --steps 1000 --warmup 50 \
    --images "$root/data/t10k-images-idx3-ubyte.gz" --labels "$root/data/t10k-labels-idx1-ubyte.gz" \
    >"$out/pytorch-$model.log" 2>&1 || { fail "PyTorch $model exited $? (log pytorch-$model.log)"; why "pytorch-$model.log"; }
  theirs=$(grep '^{' "$out/pytorch-$model.log" | tail -1 | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')
  grep '^{' "$out/bench-$model.log" "$out/pytorch-$model.log" | sed 's/^/  /'
  awk -v m="$model" -v a="${ours:-0}" -v b="${theirs:-0}" \
    'BEGIN { printf "  %s: mgtrain %.0f, PyTorch %.0f samples/s: %.2fx\n", m, a, b, (b > 0 ? a / b : 0) }'
done

echo "== where the time goes (diagnostics, no target): MLP without CUDA graphs, with one step in flight; MLP and CNN at batch 1024"
bench_rate() { grep '^{' "$1" | tail -1 | sed -n 's/.*"samples_per_s": *\([0-9.]*\).*/\1/p'; }
mgt 300 bench --config "$work/mlp.ini" --train.device=gpu --data.in_memory=true --steps 1000 --warmup 50 \
  --gpu.cuda_graphs=false --json >"$out/bench-mlp-eager.log" 2>&1 || fail "mgtrain bench mlp without graphs exited $?"
echo "  mlp without CUDA graphs: $(bench_rate "$out/bench-mlp-eager.log") samples/s"
# train.nonfinite = skip keeps one step in flight (the default keeps two).
mgt 300 bench --config "$work/mlp.ini" --train.device=gpu --data.in_memory=true --steps 1000 --warmup 50 \
  --train.nonfinite=skip --json >"$out/bench-mlp-depth1.log" 2>&1 || fail "mgtrain bench mlp, one step in flight, exited $?"
echo "  mlp with one step in flight: $(bench_rate "$out/bench-mlp-depth1.log") samples/s"
for model in mlp cnn; do
  mgt 300 bench --config "$work/$model.ini" --train.device=gpu --data.in_memory=true --steps 300 --warmup 30 \
    --train.global_batch=1024 --json >"$out/bench-$model-1024.log" 2>&1 || fail "mgtrain bench $model at 1024 exited $?"
  pytorch --model "$model" --steps 300 --warmup 30 --batch 1024 \
    --images "$root/data/t10k-images-idx3-ubyte.gz" --labels "$root/data/t10k-labels-idx1-ubyte.gz" \
    >"$out/pytorch-$model-1024.log" 2>&1 || fail "PyTorch $model at 1024 exited $?"
  echo "  $model batch 1024: mgtrain $(bench_rate "$out/bench-$model-1024.log"), PyTorch $(bench_rate "$out/pytorch-$model-1024.log") samples/s"
done

echo "== out of memory: a micro-batch too large for a 65 MB cap on the step's GPU memory, refused clearly, then halved"
# MGTRAIN_TEST_DEVICE_MEMORY_MB: the test-only cap; the same run on the CPU backend needs 2 passes.
big=(--train.global_batch=8192 --train.max_steps=2 --train.log_every=1 --checkpoint.dir="$work/big")
MGTRAIN_TEST_DEVICE_MEMORY_MB=65 mgt 120 train --config "$work/mlp.ini" --train.device=gpu "${big[@]}" >"$out/oom-error.log" 2>&1
rc=$?
grep 'mgtrain: error' "$out/oom-error.log" | head -3
[[ $rc -ne 0 ]] && grep -q 'out of device memory on rank 0: the micro-batch of 8192 rows' "$out/oom-error.log" ||
  fail "no clear out-of-memory error (exit $rc, log oom-error.log)"
MGTRAIN_TEST_DEVICE_MEMORY_MB=65 mgt 300 train --config "$work/mlp.ini" --train.device=gpu "${big[@]}" --gpu.on_oom=halve \
  --json >"$out/oom-halve.log" 2>&1 || { fail "gpu.on_oom = halve exited $? (log oom-halve.log)"; why oom-halve.log; }
grep -E 'warning.*gpu.on_oom|^\{' "$out/oom-halve.log" | sed 's/^/  /'
grep -q 'running it as 2 passes of 4096 rows' "$out/oom-halve.log" || fail "the micro-batch was not halved to 4096 rows"

archive
echo "== summary (logs: $archive_dir/device-check-logs.tar.gz)"
if [[ ${#failures[@]} -eq 0 ]]; then
  echo "device check PASSED"
else
  printf '  %s\n' "${failures[@]}"
  echo "device check FAILED (${#failures[@]})"
  exit 1
fi
