#!/usr/bin/env bash
# What the data reader costs, rows/s with and without augmentation, from HDF5, straight from the
# file and from memory (benchmarks/reader_rows.cpp), on FILE (default: Fashion-MNIST's training
# file, data/fashion_mnist_train.h5, which scripts/demo.sh converts). Needs a build (the
# reader is in build/lib's libmgtrain-runtime). Usage: benchmarks/reader_rows.sh [FILE]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
file=${1:-$MGTRAIN_ROOT/data/fashion_mnist_train.h5}
binary=$MGTRAIN_BUILD/bin/reader_rows
g++ -std=c++20 -O2 -I"$MGTRAIN_ROOT" -I"$MGTRAIN_ROOT/core/include" \
  "$MGTRAIN_ROOT/benchmarks/reader_rows.cpp" -o "$binary" -L"$MGTRAIN_BUILD/lib" -lmgtrain-runtime -lmgtrain \
  -Wl,-rpath,"$MGTRAIN_BUILD/lib"
exec "$binary" "$file"
