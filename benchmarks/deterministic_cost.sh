#!/usr/bin/env bash
# What deterministic mode costs: `mgtrain bench` with the examples' settings, once in the default
# mode and once with sync.deterministic = true, alternating, REPEAT times each, at every NP; prints
# each run's samples/s and per model and NP the medians and the step-time ratio (deterministic /
# default). Models: the MLP, the CNN and ResNet-20 on Fashion-MNIST, the gpt on the fortunes text.
# Each run first waits for the machine to be quiet (setup.sh's wait_for_quiet).
#
# Usage: benchmarks/deterministic_cost.sh [STEPS=100] [REPEAT=3] [NPS="2 4"] [MODELS="mlp cnn resnet gpt"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=${1:-100} repeat=${2:-3} nps=${3:-2 4} models=${4:-mlp cnn resnet gpt}
source "$here/setup.sh"
prepare_cookie "$mgtrain"

config_of() {
  case $1 in
    mlp | cnn | resnet) echo "examples/fashion_mnist_$1.ini" ;;
    gpt) echo examples/text_gpt.ini ;;
  esac
}
bench() {  # bench MODEL NP DETERMINISTIC: samples/s
  wait_for_quiet >/dev/null
  mpirun -np "$2" --oversubscribe "$mgtrain" bench --config "$(config_of "$1")" --steps "$steps" --warmup 10 \
    --allreduce-iterations 1 --sync.deterministic="$3" --json 2>/dev/null |
    sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' | tail -1
}

printf '%-7s %3s %14s %14s %9s\n' model np default determ. cost
for model in $models; do
  for np in $nps; do
    plain=() det=()
    for ((r = 0; r < repeat; r++)); do
      plain+=("$(bench "$model" "$np" false)")
      det+=("$(bench "$model" "$np" true)")
      echo "  $model np=$np round $((r + 1)): default ${plain[-1]} samples/s, deterministic ${det[-1]}" >&2
    done
    a=$(median "${plain[@]}") b=$(median "${det[@]}")
    printf '%-7s %3s %14.1f %14.1f %8.2fx\n' "$model" "$np" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
  done
done
