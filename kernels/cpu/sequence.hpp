#pragma once
// Plain loops for a transformer's layers on the CPU (mgt::Ops' sequence operations): embedding,
// layer normalisation, the rows' softmax of attention and GELU. Every reduction runs in an order
// fixed by the shape alone, so a row gets the same bits in any batch.
#include <cstdint>

namespace mgt::kernels {

void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                       int64_t positions, int64_t dim);
void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim);

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t dim,
                        float eps);
void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                         int64_t rows, int64_t dim, float eps, bool accumulate);

void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal);
void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale);

void gelu_forward(const float* x, float* y, int64_t n);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace mgt::kernels
