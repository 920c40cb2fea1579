#!/usr/bin/env bash
# What checking a data row's CRC-32 costs, libdeflate's (what the reader uses) against zlib's, on
# 784-byte rows (benchmarks/row_crc32.cpp). Usage: benchmarks/row_crc32.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
binary=$MGTRAIN_BUILD/bin/row_crc32
mkdir -p "$(dirname "$binary")"
g++ -std=c++20 -O3 -march=native -I"$MGTRAIN_ROOT" "$MGTRAIN_ROOT/benchmarks/row_crc32.cpp" -o "$binary" -lz -ldeflate
exec "$binary"
