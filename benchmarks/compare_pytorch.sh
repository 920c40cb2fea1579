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

use_pytorch_venv
pytorch() { torch_env "$venv/bin/python" "$here/pytorch_ddp.py" --model "$model" --steps "$steps" "$@"; }

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
