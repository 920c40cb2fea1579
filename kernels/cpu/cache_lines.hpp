#pragma once
// Storing to memory that other cores read: the node's shared parameters, which the optimizer's
// update writes after every rank's forward and backward read them, and the gradient slots
// (core/src/sdk/shared_memory_allreduce.cpp), which a rank fills after the others read them.
//
// A store to a line that another core holds a copy of waits until that copy is invalidated. Where
// the two cores sit in different core complexes (an AMD CPU's CCDs, or virtual CPUs that a
// hypervisor moves between them), those invalidations do not overlap; evicting the lines a few
// blocks ahead of the stores, or storing past the caches, avoids the wait (PREFETCHW does not: it
// leaves a line that is present as it is). See docs/benchmarks.md, "Shared memory between cores".
#include <cstddef>

namespace mgt::kernels {

// dst[0, n) = src[0, n), dst's whole lines with non-temporal stores: no line comes into this core's
// cache, and no store waits for another core's copy to go. Ordered with later stores (a barrier's
// release) only after stream_fence().
void stream_copy(float* dst, const float* src, size_t n);
void stream_fence();

// Writes back and drops [p, p + bytes)'s lines from every cache, without waiting for that to
// complete: a store to them afterwards finds no copy on another core to invalidate. Nothing where
// the CPU lacks CLFLUSHOPT.
void evict_lines(const void* p, size_t bytes);

}  // namespace mgt::kernels
