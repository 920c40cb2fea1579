// Deterministic mode's fixed-order weight gradient (kernels/cpu/tree_outer_products) against
// oneDNN's sgemm at the same shapes, one thread: per shape the median time and GFLOP/s of the
// vector form this CPU takes, of the AVX2 form where the CPU has it, and of sgemm (dW = dy^T x over
// every shard's rows at once, whose order of additions is its own). The kernel's bits are checked
// against the plain reference on every shape; a mismatch exits 1. The last line is JSON.
//
// Shapes: the gpt's linear layers at np=2 (4 micro-shards of 4 windows x 128 tokens a rank; the
// examples' dim 128, 4x MLP, vocabulary 256), the MLP's fc1 (4 shards of 16 rows, 784 -> 512) and
// the CNN's fc1 (3136 -> 128). Usage: tree_rate. Built and run by benchmarks/tree_rate.sh.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/cpu/tree_outer_products.hpp"
#include "oneapi/dnnl/dnnl.h"

namespace {

using Clock = std::chrono::steady_clock;

double median_seconds(const std::function<void()>& fn) {
  fn();
  std::vector<double> samples;
  for (int s = 0; s < 9; ++s) {
    const auto start = Clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

struct Shape {
  const char* name;
  int64_t shards, rows, out, in;
};

}  // namespace

int main() {
  omp_set_num_threads(1);  // one rank's one thread
  const Shape shapes[] = {{"gpt qkv", 4, 512, 384, 128},    {"gpt attn.proj", 4, 512, 128, 128},
                          {"gpt mlp.fc", 4, 512, 512, 128}, {"gpt mlp.proj", 4, 512, 128, 512},
                          {"gpt head", 4, 512, 256, 128},   {"mlp fc1", 4, 16, 512, 784},
                          {"cnn fc1", 4, 16, 128, 3136}};
  std::printf("%-14s %14s %9s %14s %9s %14s %9s\n", "shape", "kernel us", "GFLOP/s", "avx2 form us", "GFLOP/s",
              "sgemm us", "GFLOP/s");
  double kernel_total = 0, sgemm_total = 0;
  for (const Shape& c : shapes) {
    std::vector<float> dy(static_cast<size_t>(c.shards * c.rows * c.out)),
        x(static_cast<size_t>(c.shards * c.rows * c.in)), dst(static_cast<size_t>(c.out * c.in)), reference(dst.size());
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::sin(static_cast<float>(i) * 0.37f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(static_cast<float>(i) * 0.11f);
    mgt::kernels::tree_outer_products_reference(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, reference.data());
    const double flops = 2.0 * static_cast<double>(c.shards * c.rows) * static_cast<double>(c.out * c.in);
    const double kernel = median_seconds(
        [&] { mgt::kernels::tree_outer_products(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, dst.data()); });
    if (std::memcmp(dst.data(), reference.data(), dst.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "tree_rate: %s: the kernel's bits differ from the reference\n", c.name);
      return 1;
    }
    double avx2 = 0;
    if (mgt::kernels::tree_outer_products_avx2(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, dst.data())) {
      if (std::memcmp(dst.data(), reference.data(), dst.size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "tree_rate: %s: the AVX2 form's bits differ from the reference\n", c.name);
        return 1;
      }
      avx2 = median_seconds([&] {
        mgt::kernels::tree_outer_products_avx2(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, dst.data());
      });
    }
    const double sgemm = median_seconds([&] {
      dnnl_sgemm('T', 'N', c.out, c.in, c.shards * c.rows, 1.0f, dy.data(), c.out, x.data(), c.in, 0.0f, dst.data(),
                 c.in);
    });
    std::printf("%-14s %14.1f %9.1f %14.1f %9.1f %14.1f %9.1f\n", c.name, 1e6 * kernel, flops / kernel / 1e9,
                1e6 * avx2, avx2 > 0 ? flops / avx2 / 1e9 : 0.0, 1e6 * sgemm, flops / sgemm / 1e9);
    kernel_total += kernel;
    sgemm_total += sgemm;
  }
  std::printf("{\"kernel_us\":%.1f,\"sgemm_us\":%.1f,\"ratio\":%.3f}\n", 1e6 * kernel_total, 1e6 * sgemm_total,
              kernel_total / sgemm_total);
}
