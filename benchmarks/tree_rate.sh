#!/usr/bin/env bash
# Deterministic mode's fixed-order weight gradient against oneDNN's sgemm at the gpt's, the MLP's
# and the CNN's shapes, one thread (benchmarks/tree_rate.cpp), built from the sources as they are.
# Usage: benchmarks/tree_rate.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
binary=$MGTRAIN_BUILD/bin/tree_rate
mkdir -p "$(dirname "$binary")"
g++ -std=c++20 -O2 -fopenmp -I"$MGTRAIN_ROOT" "$MGTRAIN_ROOT/benchmarks/tree_rate.cpp" \
  "$MGTRAIN_ROOT/kernels/cpu/tree_outer_products.cpp" -ldnnl -o "$binary"
OMP_NUM_THREADS=1 exec "$binary" "$@"
