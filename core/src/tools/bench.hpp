#pragma once
// `mgtrain bench`: trains a fixed number of steps and reports throughput, scaling against one
// rank, where a step's time goes, and the gradient all-reduce's bus bandwidth next to raw
// MPI_Allreduce on a buffer of the same size.
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "runtime/trainer.hpp"

namespace mgt {

// With repeats, the single-rank and all-rank runs alternate, and the figures are medians: on a
// shared, noisy machine a pair measured back to back compares better than two lone runs.
struct BenchResult {
  TrainResult run;                   // all ranks (samples_per_s: the median over the repeats)
  double samples_per_s_np1 = 0;      // rank 0 alone, same config and global batch (median)
  double scaling_efficiency = 0;     // median over the repeats of samples_per_s / (world * np1)
  std::vector<double> scaling_runs;  // each repeat's scaling efficiency
  double allreduce_busbw_gbs = 0;    // the sync strategy's all-reduce of the gradient buffer
  double mpi_busbw_gbs = 0;          // one MPI_Allreduce of the same buffer
  // A strategy with sync.hierarchical and sync.shared_memory (allreduce, grad_accum): its all-reduce
  // flat through MPI, through one leader per node, and through each node's shared memory; NaN when
  // the strategy has no such choice.
  double flat_busbw_gbs = std::numeric_limits<double>::quiet_NaN();
  double hierarchical_busbw_gbs = std::numeric_limits<double>::quiet_NaN();
  double shared_memory_busbw_gbs = std::numeric_limits<double>::quiet_NaN();
  double allreduce_ms = 0, mpi_allreduce_ms = 0;
  size_t gradient_bytes = 0;
};

// Runs every phase on all ranks of `world`; options.config is the parsed config with overrides.
BenchResult run_bench(Communicator& world, const TrainOptions& options, int64_t steps, int64_t warmup,
                      int64_t allreduce_iterations, int64_t repeats = 1);

// `mgtrain bench --json`: rank 0's result line.
std::string bench_result_json(const BenchResult& b, int world_size, int64_t steps, int64_t repeats);

}  // namespace mgt
