#!/usr/bin/env bash
# What two ranks on this machine could reach with no communication at all: one rank alone at the
# global batch, against two independent one-rank runs at the same time, each at half the batch
# (what each rank of np=2 computes), against mgtrain at np=2. Alternates REPEAT times and prints
# the medians:
#   ceiling    = (samples/s of the two concurrent runs together) / (2 x the lone run)
#   efficiency = mgtrain's np=2 samples/s / (2 x the lone run)
# The ceiling is the scaling efficiency that shared caches, memory bandwidth and the hypervisor
# leave; efficiency / ceiling is how much of it mgtrain reaches.
# Usage: benchmarks/scaling_ceiling.sh [MODEL=cnn|mlp] [STEPS] [REPEAT=5] [GLOBAL_BATCH=128]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:-cnn} steps=${2:-} repeat=${3:-5} batch=${4:-128}
[ -n "$steps" ] || { [ "$model" = mlp ] && steps=1000 || steps=60; }
source "$here/setup.sh"

# mpirun binds a lone rank to the first core; the two concurrent runs get one core each, as the
# two ranks of np=2 do.
bench() {  # bench NP GLOBAL_BATCH [mpirun options] -> samples/s
  local np=$1 global_batch=$2; shift 2
  mpirun -np "$np" --oversubscribe "$@" "$mgtrain" bench --config "examples/fashion_mnist_$model.ini" \
    --train.global_batch="$global_batch" --steps "$steps" --json | sed -n 's/^{.*"samples_per_s":\([0-9.]*\).*/\1/p'
}

ceilings=() efficiencies=() alone_runs=()
for i in $(seq "$repeat"); do
  alone=$(bench 1 "$batch")
  bench 1 $((batch / 2)) --cpu-set 0 >"$MGTRAIN_BUILD/.ceiling_a" &
  first=$!
  b=$(bench 1 $((batch / 2)) --cpu-set 1)
  wait $first
  a=$(cat "$MGTRAIN_BUILD/.ceiling_a")
  two=$(bench 2 "$batch")
  ceiling=$(awk -v a="$a" -v b="$b" -v s="$alone" 'BEGIN { printf "%.3f", (a + b) / (2 * s) }')
  efficiency=$(awk -v t="$two" -v s="$alone" 'BEGIN { printf "%.3f", t / (2 * s) }')
  echo "run $i: alone $alone samples/s; concurrent $a + $b; mgtrain np=2 $two; ceiling $ceiling; efficiency $efficiency"
  ceilings+=("$ceiling") efficiencies+=("$efficiency") alone_runs+=("$alone")
done
rm -f "$MGTRAIN_BUILD/.ceiling_a"
c=$(median "${ceilings[@]}") e=$(median "${efficiencies[@]}") s=$(median "${alone_runs[@]}")
awk -v c="$c" -v e="$e" -v s="$s" -v m="$model" \
  'BEGIN { printf "%s: one rank alone %.0f samples/s (median); ceiling %.3f; mgtrain np=2 efficiency %.3f = %.2f of the ceiling\n", m, s, c, e, e / c }'
