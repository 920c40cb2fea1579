// mgt::Ops' sequence operations (a transformer's layers) on the GPU against the CPU backend:
// batched GEMMs, embedding and its scatter-add (the same order, so the same bits), layer
// normalisation and its backward, attention's causal row softmax and its backward, the fused
// attention and its backward, GELU; and each repeating bit for bit on the GPU.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"

namespace mgt::test {
namespace {

using GpuSequenceOps = GpuAgainstCpu;

TEST_F(GpuSequenceOps, BatchedGemmMatchesTheCpuInAttentionsLayouts) {
  // Attention's shapes: per head, operands hd columns apart in rows of 3 * dim.
  const int64_t t = 33, hd = 16, heads = 4, ld = 3 * heads * hd;
  const auto a = random_floats(static_cast<size_t>(t * ld), 1), b = random_floats(static_cast<size_t>(t * ld), 2);
  float* ga = upload(a);
  float* gb = upload(b);
  const size_t out_n = static_cast<size_t>(heads * t * t);
  {  // S = Q K^T
    std::vector<float> want(out_n);
    cpu_->gemm_batched(false, true, t, t, hd, 0.5f, a.data(), ld, hd, b.data(), ld, hd, 0.0f, want.data(), t, t * t,
                       heads);
    float* gc = upload(std::vector<float>(out_n));
    gpu_->gemm_batched(false, true, t, t, hd, 0.5f, ga, ld, hd, gb, ld, hd, 0.0f, gc, t, t * t, heads);
    expect_close(download(gc, out_n), want, 1e-5, "Q K^T");
  }
  // O = P V and dV = P^T dO, P [t, t] per head.
  const auto p = random_floats(out_n, 3);
  float* gp = upload(p);
  for (bool ta : {false, true}) {
    const size_t o_n = static_cast<size_t>(t * heads * hd);
    std::vector<float> want(o_n);
    cpu_->gemm_batched(ta, false, t, hd, t, 1.0f, p.data(), t, t * t, b.data(), ld, hd, 0.0f, want.data(), heads * hd,
                       hd, heads);
    float* gc = upload(std::vector<float>(o_n));
    gpu_->gemm_batched(ta, false, t, hd, t, 1.0f, gp, t, t * t, gb, ld, hd, 0.0f, gc, heads * hd, hd, heads);
    expect_close(download(gc, o_n), want, 1e-5, ta ? "P^T dO" : "P V");
  }
}

TEST_F(GpuSequenceOps, EmbeddingAndItsScatterAddMatchTheCpuBitForBit) {
  const int64_t vocab = 50, positions = 12, dim = 40, rows = 3 * positions;
  std::vector<float> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) ids[static_cast<size_t>(r)] = static_cast<float>((r * 7) % 5);  // repeats
  const auto table = random_floats(static_cast<size_t>(vocab * dim), 4);
  const auto position = random_floats(static_cast<size_t>(positions * dim), 5);
  const auto dy = random_floats(static_cast<size_t>(rows * dim), 6);
  std::vector<float> y(static_cast<size_t>(rows * dim)), dtable = random_floats(table.size(), 7);
  float *g_ids = upload(ids), *g_table = upload(table), *g_position = upload(position), *g_dy = upload(dy);
  float *g_y = upload(y), *g_dtable = upload(dtable);
  cpu_->embedding_forward(ids.data(), table.data(), position.data(), y.data(), rows, positions, dim);
  gpu_->embedding_forward(g_ids, g_table, g_position, g_y, rows, positions, dim);
  EXPECT_EQ(download(g_y, y.size()), y) << "embedding forward";
  cpu_->embedding_backward(ids.data(), dy.data(), dtable.data(), rows, dim);
  gpu_->embedding_backward(g_ids, g_dy, g_dtable, rows, dim);
  EXPECT_EQ(download(g_dtable, dtable.size()), dtable) << "the scatter-add, rows in order";
  // No position table (make_token_embedding with kNoPositions): the table's rows alone.
  cpu_->embedding_forward(ids.data(), table.data(), nullptr, y.data(), rows, positions, dim);
  gpu_->embedding_forward(g_ids, g_table, nullptr, g_y, rows, positions, dim);
  EXPECT_EQ(download(g_y, y.size()), y) << "embedding forward without positions";
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + dim), std::vector<float>(table.begin(), table.begin() + dim))
      << "row 0 is token 0's row of the table";
}

TEST_F(GpuSequenceOps, LayerNormAndItsBackwardMatchTheCpu) {
  const int64_t rows = 70, dim = 96;
  auto x = random_floats(static_cast<size_t>(rows * dim), 8, -3.0f, 5.0f);
  const auto gamma = random_floats(static_cast<size_t>(dim), 9, 0.5f, 1.5f);
  const auto beta = random_floats(static_cast<size_t>(dim), 10);
  const auto dy = random_floats(x.size(), 11);
  std::vector<float> y(x.size()), dx(x.size()), dgamma = random_floats(gamma.size(), 12), dbeta = dgamma;
  float *gx = upload(x), *gg = upload(gamma), *gb = upload(beta), *gdy = upload(dy), *gy = upload(y);
  float *gdx = upload(dx), *gdg = upload(dgamma), *gdb = upload(dbeta);
  cpu_->layer_norm_forward(x.data(), gamma.data(), beta.data(), y.data(), rows, dim, 1e-5f);
  gpu_->layer_norm_forward(gx, gg, gb, gy, rows, dim, 1e-5f);
  expect_close(download(gy, y.size()), y, 1e-5, "layer norm forward");
  cpu_->layer_norm_backward(x.data(), gamma.data(), dy.data(), dx.data(), dgamma.data(), dbeta.data(), rows, dim, 1e-5f,
                            /*accumulate=*/true);
  gpu_->layer_norm_backward(gx, gg, gdy, gdx, gdg, gdb, rows, dim, 1e-5f, /*accumulate=*/true);
  expect_close(download(gdx, dx.size()), dx, 1e-5, "layer norm dx");
  expect_close(download(gdg, dgamma.size()), dgamma, 1e-5, "layer norm dgamma (accumulated)");
  expect_close(download(gdb, dbeta.size()), dbeta, 1e-5, "layer norm dbeta (accumulated)");
  gpu_->layer_norm_backward(gx, gg, gdy, gdx, gdg, gdb, rows, dim, 1e-5f, /*accumulate=*/false);
  cpu_->layer_norm_backward(x.data(), gamma.data(), dy.data(), dx.data(), dgamma.data(), dbeta.data(), rows, dim, 1e-5f,
                            /*accumulate=*/false);
  expect_close(download(gdg, dgamma.size()), dgamma, 1e-5, "layer norm dgamma (written)");
  gpu_->layer_norm_backward(gx, gg, gdy, gdx, gdg, gdb, rows, dim, 1e-5f, /*accumulate=*/false);
  const auto again = download(gdg, dgamma.size());
  gpu_->layer_norm_backward(gx, gg, gdy, gdx, gdg, gdb, rows, dim, 1e-5f, /*accumulate=*/false);
  EXPECT_EQ(download(gdg, dgamma.size()), again) << "dgamma repeats bit for bit";
}

TEST_F(GpuSequenceOps, CausalSoftmaxRowsAndTheirBackwardMatchTheCpu) {
  for (int64_t t : {1, 31, 128, 200}) {
    const int64_t rows = 3 * t;
    const auto s = random_floats(static_cast<size_t>(rows * t), 13, -20.0f, 20.0f);
    const auto dp = random_floats(s.size(), 14);
    for (bool causal : {true, false}) {
      std::vector<float> p(s.size()), ds(s.size());
      float *gs = upload(s), *gp = upload(p), *gdp = upload(dp), *gds = upload(ds);
      cpu_->softmax_rows(s.data(), p.data(), rows, t, 0.25f, causal);
      gpu_->softmax_rows(gs, gp, rows, t, 0.25f, causal);
      const auto got = download(gp, p.size());
      expect_close(got, p, 1e-5, "softmax rows, T = " + std::to_string(t) + (causal ? ", causal" : ""));
      if (causal) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = r % t + 1; c < t; ++c)
            ASSERT_EQ(got[static_cast<size_t>(r * t + c)], 0.0f) << "row " << r << " sees column " << c;
      }
      cpu_->softmax_rows_backward(p.data(), dp.data(), ds.data(), rows, t, 0.25f);
      gpu_->softmax_rows_backward(gp, gdp, gds, rows, t, 0.25f);
      expect_close(download(gds, ds.size()), ds, 1e-5, "softmax backward, T = " + std::to_string(t));
    }
  }
}

TEST_F(GpuSequenceOps, AttentionAndItsBackwardMatchTheCpusFusedForm) {
  // The GPU forms the scores with cuBLAS and keeps the row statistics as the CPU's tiles do:
  // outputs, log-sum-exp and gradients agree to rounding, for lengths across the CPU's tiles,
  // heads of several widths, rows wider than q, k and v, causal and not.
  struct Case {
    int64_t batch, tokens, heads, head_dim;
  };
  for (const Case c : {Case{2, 1, 1, 4}, Case{2, 37, 3, 16}, Case{3, 128, 4, 32}, Case{1, 200, 2, 24}}) {
    for (bool causal : {true, false}) {
      AttentionShape s;
      s.batch = c.batch;
      s.tokens = c.tokens;
      s.heads = c.heads;
      s.head_dim = c.head_dim;
      const int64_t dim = c.heads * c.head_dim;
      s.ld = 3 * dim + 2;
      s.ld_out = dim + 3;
      s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      s.causal = causal;
      const std::string what = "T = " + std::to_string(c.tokens) + ", head_dim = " + std::to_string(c.head_dim) +
                               (causal ? ", causal" : ", bidirectional");
      const auto qkv = random_floats(static_cast<size_t>(s.batch * s.tokens * s.ld), 17, -2.0f, 2.0f);
      const auto dout = random_floats(static_cast<size_t>(s.batch * s.tokens * s.ld_out), 18);
      const size_t lse_n = static_cast<size_t>(s.batch * s.heads * s.tokens);
      std::vector<float> out(dout.size(), 0.0f), lse(lse_n), grad(qkv.size(), 0.0f);
      std::vector<char> cpu_work(cpu_->attention_workspace(s));
      const float* q = qkv.data();
      cpu_->attention_forward(s, q, q + dim, q + 2 * dim, out.data(), lse.data(), cpu_work.data());
      cpu_->attention_backward(s, q, q + dim, q + 2 * dim, out.data(), dout.data(), lse.data(), grad.data(),
                               grad.data() + dim, grad.data() + 2 * dim, cpu_work.data());

      float *g_qkv = upload(qkv), *g_dout = upload(dout), *g_out = upload(std::vector<float>(out.size(), 0.0f));
      float *g_lse = upload(std::vector<float>(lse_n)), *g_grad = upload(std::vector<float>(grad.size(), 0.0f));
      float* g_work = upload(std::vector<float>(gpu_->attention_workspace(s) / sizeof(float) + 1));
      gpu_->attention_forward(s, g_qkv, g_qkv + dim, g_qkv + 2 * dim, g_out, g_lse, g_work);
      expect_close(download(g_out, out.size()), out, 1e-5, "attention output, " + what);
      expect_close(download(g_lse, lse_n), lse, 1e-5, "attention log-sum-exp, " + what);
      // Backward from the CPU's output, so that only the backward's own rounding is compared.
      float* g_cpu_out = upload(out);
      gpu_->attention_backward(s, g_qkv, g_qkv + dim, g_qkv + 2 * dim, g_cpu_out, g_dout, g_lse, g_grad, g_grad + dim,
                               g_grad + 2 * dim, g_work);
      const auto got = download(g_grad, grad.size());
      expect_close(got, grad, 1e-5, "attention dQ, dK, dV, " + what);
      gpu_->attention_backward(s, g_qkv, g_qkv + dim, g_qkv + 2 * dim, g_cpu_out, g_dout, g_lse, g_grad, g_grad + dim,
                               g_grad + 2 * dim, g_work);
      EXPECT_EQ(download(g_grad, grad.size()), got) << "the GPU's attention backward repeats bit for bit, " << what;
    }
  }
}

TEST_F(GpuSequenceOps, GeluAndItsDerivativeMatchTheCpu) {
  const size_t n = 5003;
  const auto x = random_floats(n, 15, -8.0f, 8.0f), dy = random_floats(n, 16);
  std::vector<float> y(n), dx(n);
  float *gx = upload(x), *gdy = upload(dy), *gy = upload(y), *gdx = upload(dx);
  cpu_->gelu_forward(x.data(), y.data(), static_cast<int64_t>(n));
  gpu_->gelu_forward(gx, gy, static_cast<int64_t>(n));
  expect_close(download(gy, n), y, 1e-6, "gelu");
  cpu_->gelu_backward(x.data(), dy.data(), dx.data(), static_cast<int64_t>(n));
  gpu_->gelu_backward(gx, gdy, gdx, static_cast<int64_t>(n));
  expect_close(download(gdx, n), dx, 1e-5, "gelu derivative");
}

}  // namespace
}  // namespace mgt::test
