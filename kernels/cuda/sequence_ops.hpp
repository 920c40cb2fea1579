#pragma once
// The sequence operations of mgt::Ops (a transformer's embedding, layer normalisation, attention's
// row softmax and the row kernels of its fused form, GELU) on device memory, with the semantics
// ops.hpp gives them. Reductions add in a fixed order (a warp's shuffle tree per row, a thread per
// column over the rows in order), never with floating-point atomics, so a run repeats bit for bit.
// Launched on `stream`, capturable in a CUDA graph.
#include <cstdint>

#include "kernels/cuda/runtime.hpp"

namespace mgt::cuda {

void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                       int64_t positions, int64_t dim, Stream stream);
void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim, Stream stream);
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t dim,
                        float eps, Stream stream);
void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                         int64_t rows, int64_t dim, float eps, bool accumulate, Stream stream);
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal, Stream stream);
void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale,
                           Stream stream);
// Attention's row kernels, over one sample's scores [heads, tokens, tokens] (cuBLAS forms the
// products around them): a row r is query r % tokens of head r / tokens.
// p = softmax(scale * s) per row (the causal mask as softmax_rows'), and row_lse = each row's
// log-sum-exp of its scaled scores over the keys it sees; p may be s.
void attention_softmax(const float* s, float* p, float* row_lse, int64_t rows, int64_t tokens, float scale, bool causal,
                       Stream stream);
// s (the scores again) turned in place into the probabilities exp(scale * s - row_lse), 0 where masked.
void attention_probabilities(float* s, const float* row_lse, int64_t rows, int64_t tokens, float scale, bool causal,
                             Stream stream);
// dp (dO V^T) turned in place into dS = scale * P (dP - D), D = the row's dot product of the
// output and its gradient (head h of token i: out + i * ld_out + h * head_dim, dout likewise).
void attention_score_gradients(const float* p, float* dp, const float* out, const float* dout, int64_t ld_out,
                               int64_t head_dim, int64_t rows, int64_t tokens, float scale, Stream stream);
void gelu_forward(const float* x, float* y, int64_t n, Stream stream);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, Stream stream);

}  // namespace mgt::cuda
