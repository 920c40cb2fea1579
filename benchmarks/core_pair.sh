#!/usr/bin/env bash
# What this machine's two cores do to each other, sampled for SECONDS (benchmarks/core_pair.cpp):
# the round trip of a cache line between them, compute on both at once against one alone, and
# the cost of writing 470 KB that the other core has just read (plain, evicting ahead as the
# shared update does, streamed; plain again after the other core has read 4 MB more) or of
# reading what it streamed. Run it next to
# `mpirun -np 2 mgtrain bench` on a virtual machine: its host may move the two virtual CPUs
# between core complexes (round trips of hundreds of ns) or onto one physical core (compute
# slowdown near 2), and np=2's throughput follows.
# Usage: benchmarks/core_pair.sh [SECONDS=20 [CPU_A=0 CPU_B=1]] [--samples]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
binary=$MGTRAIN_BUILD/bin/core_pair
mkdir -p "$(dirname "$binary")"
g++ -std=c++20 -O3 -march=native -pthread -I"$MGTRAIN_ROOT" "$MGTRAIN_ROOT/benchmarks/core_pair.cpp" \
  "$MGTRAIN_ROOT/kernels/cpu/cache_lines.cpp" -o "$binary"
exec "$binary" "$@"
