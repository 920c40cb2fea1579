#pragma once
// Scaled dot-product attention on the CPU, fused per sample and head and computed in tiles that
// stay in L1/L2 (as FlashAttention does on GPUs): no [batch, heads, tokens, tokens] buffer; forward
// keeps each query's log-sum-exp, backward forms each tile's probabilities again from it; tiles
// entirely above the diagonal of a causal mask are skipped. The semantics are mgt::Ops'
// (mgtrain/ops.hpp): q, k, v and their gradients in rows of shape.ld, head h in columns
// h * head_dim, the output in rows of shape.ld_out.
//
// Every sum runs in an order fixed by the shape (the tile sizes are constants), and the products
// are fused multiply-adds written as such (std::fma, rounded once in every clone), so a sample
// gets the same bits in any batch, whichever of the kernel's clones the CPU runs.
#include <cstddef>
#include <cstdint>

#include "mgtrain/ops.hpp"

namespace mgt::kernels {

// Bytes of scratch the two passes need for this shape (its per-head packed operands and tiles).
size_t attention_workspace(const AttentionShape& shape);

void attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v, float* out,
                       float* row_lse, void* workspace);

void attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, const float* row_lse, float* dq, float* dk, float* dv, void* workspace);

}  // namespace mgt::kernels
