#!/usr/bin/env bash
# Installs what is missing, builds Release, converts Fashion-MNIST to HDF5, trains the MLP on two
# ranks, evaluates the final checkpoint on the test set and prints what it reached.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/install_deps.sh"
source "$here/env.sh"
mgtrain_build Release -DMGTRAIN_BUILD_TESTS=OFF
mgtrain=$MGTRAIN_BUILD/bin/mgtrain
cd "$MGTRAIN_ROOT"

prepare_fashion_mnist "$mgtrain"

# A fresh run each time: the checkpoint directory of the example config is emptied first.
rm -rf runs/fashion_mnist_mlp
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mpirun -np 2 --oversubscribe "$mgtrain" train --config examples/fashion_mnist_mlp.ini --json "$@" | tee "$log"
summary=$(grep '^{' "$log" | tail -n 1)
checkpoint=$(sed -n 's/.*"checkpoint":"\([^"]*\)".*/\1/p' <<<"$summary")
rate=$(sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' <<<"$summary")
eval_line=$("$mgtrain" eval --checkpoint "$checkpoint" --data data/fashion_mnist_test.h5 --json)
accuracy=$(sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p' <<<"$eval_line")
echo
echo "test accuracy: $accuracy"
echo "samples/s:     $rate (2 ranks)"
echo "checkpoint:    $checkpoint"
