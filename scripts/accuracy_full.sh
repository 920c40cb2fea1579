#!/usr/bin/env bash
# The full accuracy runs behind the shortened e2e tests: MLP and CNN, 10 epochs of Fashion-MNIST
# at np=2 and global batch 128, and the MLP at np=1 for the samples/s comparison. Prints test
# accuracy, samples/s and peak RSS per rank for each. Takes a while on two cores (the CNN most).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/install_deps.sh"
source "$here/env.sh"
mgtrain_build Release
mgtrain=$MGTRAIN_BUILD/bin/mgtrain
cd "$MGTRAIN_ROOT"
prepare_fashion_mnist "$mgtrain"

run() {  # run NAME NP CONFIG [overrides]
  local name=$1 np=$2 config=$3; shift 3
  rm -rf "runs/full-$name"
  local summary
  summary=$(mpirun -np "$np" --oversubscribe "$mgtrain" train --config "$config" \
    --checkpoint.dir="runs/full-$name" --json "$@" | grep '^{' | tail -n 1)
  local checkpoint=$(sed -n 's/.*"checkpoint":"\([^"]*\)".*/\1/p' <<<"$summary")
  local accuracy=$("$mgtrain" eval --checkpoint "$checkpoint" --data data/fashion_mnist_test.h5 --json |
    sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p')
  printf '%-8s np=%s  test accuracy %s  %s\n' "$name" "$np" "$accuracy" "$summary"
}
run mlp-np2 2 examples/fashion_mnist_mlp.ini
run mlp-np1 1 examples/fashion_mnist_mlp.ini
run cnn-np2 2 examples/fashion_mnist_cnn.ini
