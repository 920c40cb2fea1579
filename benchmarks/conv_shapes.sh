#!/usr/bin/env bash
# Each convolution shape of ResNet-20's or the CNN's step: oneDNN's own best time for it alone
# against mgtrain's CPU convolution as a step calls it (benchmarks/conv_shapes.cpp), built
# against the oneDNN mgtrain's build found (MGTRAIN_BUILD's CMake cache).
# Usage: benchmarks/conv_shapes.sh [resnet|cnn] [BATCH=64]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
binary=$MGTRAIN_BUILD/bin/conv_shapes
cache=$MGTRAIN_BUILD/CMakeCache.txt
[[ -f $cache ]] || { echo "conv_shapes: no build at $MGTRAIN_BUILD (run scripts/build.sh first)" >&2; exit 1; }
include=$(sed -n 's/^DNNL_INCLUDE_DIR:PATH=//p' "$cache")
library=$(sed -n 's/^DNNL_LIBRARY:FILEPATH=//p' "$cache")
mkdir -p "$(dirname "$binary")"
g++ -std=c++20 -O2 -fopenmp -I"$MGTRAIN_ROOT" -I"$MGTRAIN_ROOT/core/include" -I"$include" \
  "$MGTRAIN_ROOT/benchmarks/conv_shapes.cpp" "$MGTRAIN_ROOT/kernels/cpu/conv2d.cpp" \
  "$MGTRAIN_ROOT/kernels/cpu/dnnl_context.cpp" "$library" -Wl,-rpath,"$(dirname "$library")" -o "$binary"
# One thread, as each rank of mgtrain (train.threads = 1) and of the PyTorch reference.
OMP_NUM_THREADS=1 exec "$binary" "$@"
