#pragma once
// Single-precision GEMM and the CPU thread setting, through oneDNN. Row-major, like dnnl_sgemm:
// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n].
#include <cstdint>

namespace mgt::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Whether sgemm gives every row of a linear layer's forward (y = b + x W^T, W [out, in]) and input
// gradient (dx = dy W) the same bits when the rows come as one batch of shards x shard_rows as
// when they come shard_rows at a time, for these sizes and the current thread setting. oneDNN does
// not promise it, so deterministic mode asks before it batches micro-shards (the answer is
// computed once per shape, from fixed pseudo-random data, and kept).
bool sgemm_rows_independent(int64_t shard_rows, int64_t shards, int64_t out, int64_t in);

// Threads oneDNN (OpenMP) uses for GEMM and convolution on the calling thread; each rank uses one
// by default when ranks >= cores, and the launcher sets it.
void set_cpu_threads(int threads);
int cpu_threads();

// The cores this process may run on (sched_getaffinity: mpirun's or srun's binding, cgroups'
// cpusets), at least 1: more compute threads than these only contend, and very many fail to start.
int usable_cpu_cores();

}  // namespace mgt::kernels
