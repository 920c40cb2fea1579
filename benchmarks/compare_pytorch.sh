#!/usr/bin/env bash
# Side by side, in one run: mgtrain bench and PyTorch DDP (gloo, one thread per rank) on the same
# model, data and global batch, alternating, REPEAT times each; prints every figure (samples/s,
# peak RSS of the largest rank, scaling from one rank to NP) and the ratio of the medians.
# Usage: benchmarks/compare_pytorch.sh [MODEL=mlp|cnn|resnet] [NP=2] [STEPS] [REPEAT=3]
#
# The peer is PyTorch as a user installs it today, from PyPI, in a venv this script creates on
# first use and reuses: $MGTRAIN_BENCH_VENV, by default build/pytorch-venv (the wheel is large).
# Scaling: mgtrain bench runs rank 0 alone at the same global batch before the NP-rank run;
# PyTorch runs world 1 after world NP. Efficiency = samples/s at NP / (NP x samples/s alone).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:-mlp} np=${2:-2} steps=${3:-} repeat=${4:-3}
case "$model" in
  mlp) default_steps=1000 ;;
  cnn) default_steps=60 ;;
  resnet) default_steps=40 ;;
  *) echo "compare_pytorch.sh: model '$model': expected mlp, cnn or resnet" >&2; exit 2 ;;
esac
steps=${steps:-$default_steps}
source "$here/setup.sh"

# PyTorch from PyPI. Its Linux wheel is the CUDA build, which runs on the CPU when the libraries it
# links are found: those of the CUDA toolkit in /usr/local/cuda/lib where there is one, the rest
# from the nvidia-* wheels torch names (at the versions it pins). Where that is not enough, torch
# is installed with all its dependencies.
venv=${MGTRAIN_BENCH_VENV:-$MGTRAIN_BUILD/pytorch-venv}
torch_env() {
  local libs=("$venv"/lib/python3*/site-packages/nvidia/*/lib) path=""
  for d in "${libs[@]}" /usr/local/cuda/lib /usr/local/cuda/lib64; do [ -d "$d" ] && path+="$d:"; done
  LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:-}" "$@"
}
has_torch() { torch_env "$venv/bin/python" -c "import torch, torch.distributed" >/dev/null 2>&1; }
if ! has_torch; then
  # pip's notes on the dependencies left out on purpose go to a log, shown when something fails.
  pip() { "$venv/bin/pip" install --disable-pip-version-check -q "$@" >>"$venv/pip.log" 2>&1 ||
    { tail -20 "$venv/pip.log" >&2; echo "compare_pytorch.sh: pip install $* failed (is PyPI reachable?)" >&2; exit 1; }; }
  [ -x "$venv/bin/pip" ] || "${PYTHON:-python3}" -m venv "$venv" ||
    { echo "compare_pytorch.sh: '${PYTHON:-python3} -m venv $venv' failed (Debian: python3-venv)" >&2; exit 1; }
  echo "installing PyTorch from PyPI into $venv"
  pip --no-deps torch
  pip numpy typing_extensions sympy networkx jinja2 fsspec filelock
  # The nvidia-* wheels with the libraries the CUDA toolkit lacks, at torch's pins.
  mapfile -t nvidia < <("$venv/bin/python" - <<'EOF'
import importlib.metadata as md, re
for req in md.requires("torch") or []:
    spec = req.split(";")[0].replace(" ", "")
    if re.match(r"nvidia-(cusparselt|nvshmem|nccl)-", spec):
        print(spec)
EOF
  )
  pip --no-deps nvidia-cufile "${nvidia[@]}"
  has_torch || pip torch
  has_torch || {
    torch_env "$venv/bin/python" -c "import torch, torch.distributed" 2>&1 | tail -3 >&2
    echo "compare_pytorch.sh: torch installed into $venv but cannot be imported" >&2
    exit 1
  }
fi
pytorch() { torch_env "$venv/bin/python" "$here/pytorch_ddp.py" --model "$model" --steps "$steps" "$@"; }
echo "torch $(torch_env "$venv/bin/python" -c 'import torch; print(torch.__version__)') from $venv;" \
  "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"

field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" <<<"$2"; }
ours=() ours_rss=() ours_scaling=() theirs=() theirs_rss=() theirs_scaling=()
for i in $(seq "$repeat"); do
  line=$(mpirun -np "$np" --oversubscribe "$mgtrain" bench --config "examples/fashion_mnist_$model.ini" \
    --steps "$steps" --json | grep '^{')
  echo "mgtrain  $line"
  ours+=("$(field samples_per_s "$line")") ours_rss+=("$(field peak_rss_mb "$line")")
  ours_scaling+=("$(field scaling_efficiency "$line")")
  line=$(pytorch --world "$np")
  echo "pytorch  $line"
  theirs+=("$(field samples_per_s "$line")") theirs_rss+=("$(field peak_rss_mb "$line")")
  if [ "$np" -gt 1 ]; then
    alone=$(pytorch --world 1)
    echo "pytorch  $alone"
    theirs_scaling+=("$(awk -v a="$(field samples_per_s "$line")" -v s="$(field samples_per_s "$alone")" -v n="$np" \
      'BEGIN { printf "%.4f", a / (n * s) }')")
  else
    theirs_scaling+=(1)
  fi
done
awk -v a="$(median "${ours[@]}")" -v b="$(median "${theirs[@]}")" -v m="$model" -v n="$np" \
  -v ra="$(median "${ours_rss[@]}")" -v rb="$(median "${theirs_rss[@]}")" \
  -v sa="$(median "${ours_scaling[@]}")" -v sb="$(median "${theirs_scaling[@]}")" 'BEGIN {
    printf "%s np=%s: mgtrain median %.0f samples/s, PyTorch DDP median %.0f samples/s, ratio %.2fx\n", m, n, a, b, a / b
    printf "%s np=%s: peak RSS of the largest rank, medians: mgtrain %.0f MB, PyTorch DDP %.0f MB, ratio %.2f\n", m, n, ra, rb, ra / rb
    printf "%s scaling 1 -> %s ranks, medians: mgtrain %.3f, PyTorch DDP %.3f\n", m, n, sa, sb
  }'
