// oneDNN's single-thread sgemm rate at the GEMMs of one training step of the gpt model, with the
// transposes and leading dimensions plugins/models/gpt's layers pass (core/src/sdk/layers/
// linear.cpp, tied_head.cpp, attention.cpp): the ceiling a step on one core could reach if it
// were GEMMs alone, to set the measured step time against.
//
// Per GEMM kind: calls per step, FLOPs per call (2 m n k), the median time of a call and its rate;
// then the step's GEMM FLOPs and the time they take at those rates. The last line is JSON.
//
// Usage: gemm_rate [BATCH=16 [CONTEXT=128 [DIM=128 [HEADS=4 [LAYERS=4 [VOCAB=256]]]]]]
// (BATCH: the windows of one rank's micro-batch, 16 at np=2 with the global batch of 32).
// Built and run by benchmarks/gemm_rate.sh.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.h"

namespace {

struct Gemm {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t calls;  // per training step of one rank
};

double flops(const Gemm& g) { return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * g.k; }

// Median seconds of one call, over batches of calls that each take about 20 ms, operands the
// same on every call (they stay in cache as far as they fit, as in a step's back-to-back GEMMs).
double time_call(const Gemm& g) {
  const int64_t a_rows = g.trans_a ? g.k : g.m, b_rows = g.trans_b ? g.n : g.k;
  std::vector<float> a(static_cast<size_t>(a_rows * g.lda)), b(static_cast<size_t>(b_rows * g.ldb)),
      c(static_cast<size_t>(g.m * g.ldc));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.02f - 0.06f;
  const auto call = [&] {
    if (dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.m, g.n, g.k, 1.0f, a.data(), g.lda, b.data(), g.ldb,
                   0.0f, c.data(), g.ldc) != dnnl_success) {
      std::fprintf(stderr, "gemm_rate: dnnl_sgemm failed for %s\n", g.name.c_str());
      std::exit(1);
    }
  };
  using Clock = std::chrono::steady_clock;
  call();  // the first call JITs the kernel
  const auto once_start = Clock::now();
  call();
  const double once = std::chrono::duration<double>(Clock::now() - once_start).count();
  const int64_t per_batch = std::max<int64_t>(1, static_cast<int64_t>(0.02 / std::max(once, 1e-7)));
  std::vector<double> samples;
  for (int s = 0; s < 9; ++s) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < per_batch; ++i) call();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(per_batch));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

int64_t arg(int argc, char** argv, int i, int64_t fallback) {
  if (argc <= i) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(argv[i], &end, 10);
  if (*end != '\0' || v <= 0) {
    std::fprintf(stderr, "gemm_rate: argument %d '%s': expected a positive integer\n", i, argv[i]);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = arg(argc, argv, 1, 16), t = arg(argc, argv, 2, 128), dim = arg(argc, argv, 3, 128),
                heads = arg(argc, argv, 4, 4), layers = arg(argc, argv, 5, 4), vocab = arg(argc, argv, 6, 256);
  if (dim % heads != 0) {
    std::fprintf(stderr, "gemm_rate: HEADS %lld does not divide DIM %lld\n", static_cast<long long>(heads),
                 static_cast<long long>(dim));
    return 2;
  }
  omp_set_num_threads(1);  // one rank's one thread
  const int64_t rows = batch * t, hd = dim / heads, ld = 3 * dim;
  std::vector<Gemm> gemms;
  // A token-wise linear layer x [rows, in] -> y [rows, out], W [out, in]: y = x W^T,
  // dW = dy^T x, dx = dy W.
  const auto linear = [&](const std::string& name, int64_t in, int64_t out, int64_t count) {
    gemms.push_back({name + " fwd", false, true, rows, out, in, in, in, out, count});
    gemms.push_back({name + " dW", true, false, out, in, rows, out, in, in, count});
    gemms.push_back({name + " dx", false, false, rows, in, out, out, in, in, count});
  };
  linear("qkv", dim, 3 * dim, layers);
  linear("attn.proj", dim, dim, layers);
  linear("mlp.fc", dim, 4 * dim, layers);
  linear("mlp.proj", 4 * dim, dim, layers);
  linear("head (tied)", dim, vocab, 1);
  // Attention, per sample and head, reading q, k, v in place from [T, 3 dim].
  const int64_t per_head = layers * batch * heads;
  gemms.push_back({"attn S=QK^T", false, true, t, t, hd, ld, ld, t, per_head});
  gemms.push_back({"attn O=PV", false, false, t, hd, t, t, ld, dim, per_head});
  gemms.push_back({"attn dP=dO V^T", false, true, t, t, hd, dim, ld, t, per_head});
  gemms.push_back({"attn dV=P^T dO", true, false, t, hd, t, t, dim, ld, per_head});
  gemms.push_back({"attn dQ=dS K", false, false, t, hd, t, t, ld, ld, per_head});
  gemms.push_back({"attn dK=dS^T Q", true, false, t, hd, t, t, ld, ld, per_head});

  std::printf("%-16s %-2s %6s %6s %6s %7s %12s %10s %12s\n", "gemm", "op", "m", "n", "k", "calls", "us/call", "GFLOP/s",
              "ms/step");
  double step_flops = 0, step_seconds = 0, attn_flops = 0, attn_seconds = 0;
  for (const Gemm& g : gemms) {
    const double s = time_call(g);
    const double f = flops(g);
    std::printf("%-16s %c%c %6lld %6lld %6lld %7lld %12.2f %10.1f %12.3f\n", g.name.c_str(), g.trans_a ? 'T' : 'N',
                g.trans_b ? 'T' : 'N', static_cast<long long>(g.m), static_cast<long long>(g.n),
                static_cast<long long>(g.k), static_cast<long long>(g.calls), 1e6 * s, f / s / 1e9,
                1e3 * s * static_cast<double>(g.calls));
    step_flops += f * static_cast<double>(g.calls);
    step_seconds += s * static_cast<double>(g.calls);
    if (g.name.rfind("attn ", 0) == 0) {
      attn_flops += f * static_cast<double>(g.calls);
      attn_seconds += s * static_cast<double>(g.calls);
    }
  }
  std::printf(
      "one rank's step (%lld windows of %lld tokens): %.3f GFLOP of GEMMs (attention %.3f, full T x T), "
      "%.2f ms at sgemm's rates = %.1f GFLOP/s (attention alone %.1f GFLOP/s)\n",
      static_cast<long long>(batch), static_cast<long long>(t), step_flops / 1e9, attn_flops / 1e9, 1e3 * step_seconds,
      step_flops / step_seconds / 1e9, attn_flops / attn_seconds / 1e9);
  std::printf(
      "{\"batch\": %lld, \"context\": %lld, \"gemm_gflop\": %.6f, \"attention_gflop\": %.6f, \"gemm_ms\": %.4f, "
      "\"attention_ms\": %.4f, \"gemm_gflops\": %.3f}\n",
      static_cast<long long>(batch), static_cast<long long>(t), step_flops / 1e9, attn_flops / 1e9, 1e3 * step_seconds,
      1e3 * attn_seconds, step_flops / step_seconds / 1e9);
  return 0;
}
