#!/usr/bin/env bash
# Side by side, in one run: mgtrain bench and PyTorch DDP (gloo, one thread per rank) on the same
# model, data and global batch, alternating, REPEAT times each; prints every figure and the ratio of
# the medians. Usage: benchmarks/compare_pytorch.sh [MODEL=mlp|cnn] [NP=2] [STEPS] [REPEAT=3]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:-mlp} np=${2:-2} steps=${3:-} repeat=${4:-3}
[ -n "$steps" ] || { [ "$model" = mlp ] && steps=1000 || steps=60; }
"$here/../scripts/install_deps.sh"
dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed" || {
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq python3-torch python3-numpy
}
source "$here/../scripts/env.sh"
mgtrain_build Release >/dev/null
mgtrain=$MGTRAIN_BUILD/bin/mgtrain
prepare_fashion_mnist "$mgtrain"
cd "$MGTRAIN_ROOT"

ours=() theirs=()
for i in $(seq "$repeat"); do
  line=$(mpirun -np "$np" --oversubscribe "$mgtrain" bench --config "examples/fashion_mnist_$model.ini" \
    --steps "$steps" --json | grep '^{')
  echo "mgtrain  $line"
  ours+=("$(sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' <<<"$line")")
  line=$(/usr/bin/python3 "$here/pytorch_ddp.py" --model "$model" --world "$np" --steps "$steps")
  echo "pytorch  $line"
  theirs+=("$(sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' <<<"$line")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_ours=$(median "${ours[@]}") m_theirs=$(median "${theirs[@]}")
awk -v a="$m_ours" -v b="$m_theirs" -v m="$model" -v n="$np" \
  'BEGIN { printf "%s np=%s: mgtrain median %.0f samples/s, PyTorch DDP median %.0f samples/s, ratio %.2fx\n", m, n, a, b, a / b }'
