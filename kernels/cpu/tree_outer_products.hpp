#pragma once
// The weight gradient of a linear layer in deterministic mode: a sum of per-micro-shard outer
// products in one fixed binary tree, computed in a single pass over the shards' rows.
#include <cstdint>

namespace mgt::kernels {

// dst[o, i] = tree sum over shards s = 0 .. shards-1 (a power of two) of
//   leaf_s[o, i] = sum over r = 0 .. rows-1, in that order, of dy_s[r, o] * x_s[r, i]
// where dy_s = dy + s * rows * out ([rows, out], row-major) and x_s = x + s * rows * in
// ([rows, in]). Each leaf starts from +0 and adds one fused multiply-add per row; the tree is
// the balanced one, ((leaf0 + leaf1) + (leaf2 + leaf3)) and so on. So the bits depend only on
// the inputs, the row count and the shard count: never on blocking, threads or the instruction
// set, and half the shards' tree plus the other half's equals the whole tree (how ranks combine
// their subtrees).
void tree_outer_products(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                         float* dst);

// dst[c] = tree sum over shards s (a power of two) of the column sums of dy_s [rows, cols] (at
// dy + s * rows * cols), each leaf summed over its rows in order from +0, the tree the balanced
// one: a linear layer's bias gradient, with the same guarantees as tree_outer_products.
void tree_column_sums(const float* dy, int64_t shards, int64_t rows, int64_t cols, float* dst);

// The same sum written plainly (one output at a time, std::fma), for tests and for CPUs without
// AVX2 and FMA, where tree_outer_products uses it.
void tree_outer_products_reference(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out,
                                   int64_t in, float* dst);

// The vector forms tree_outer_products picks from (AVX-512 first, then AVX2 with FMA; one
// template, tree_outer_products_simd.hpp, compiled for each), callable
// one by one so that tests compare each with the reference on any CPU that has it: false, with
// nothing written, where this CPU (or build) lacks the instructions.
bool tree_outer_products_avx512(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                                float* dst);
bool tree_outer_products_avx2(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                              float* dst);

}  // namespace mgt::kernels
