#!/usr/bin/env bash
# oneDNN's single-thread sgemm rate at the GEMMs of one gpt training step (benchmarks/gemm_rate.cpp),
# built against Debian's libdnnl-dev, the library mgtrain's CPU backend calls.
# Usage: benchmarks/gemm_rate.sh [BATCH=16 [CONTEXT=128 [DIM=128 [HEADS=4 [LAYERS=4 [VOCAB=256]]]]]]
# (BATCH: one rank's windows; 16 at np=2 with the global batch of 32, 32 at np=1)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
binary=$MGTRAIN_BUILD/bin/gemm_rate
mkdir -p "$(dirname "$binary")"
g++ -std=c++20 -O2 -fopenmp "$MGTRAIN_ROOT/benchmarks/gemm_rate.cpp" -ldnnl -o "$binary"
# One thread, as each rank of mgtrain (train.threads = 1) and of the PyTorch reference.
OMP_NUM_THREADS=1 exec "$binary" "$@"
