#include "kernels/cpu/gemm.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "mgtrain/error.hpp"
#include "oneapi/dnnl/dnnl.h"

namespace mgt::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw Error("dnnl_sgemm failed with status " + std::to_string(static_cast<int>(status)) +
                " for m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
}

namespace {

bool rows_independent_measured(int64_t shard_rows, int64_t shards, int64_t out, int64_t in) {
  const int64_t rows = shard_rows * shards;
  // Values from a fixed linear congruential sequence in [-1, 1).
  uint32_t state = 12345;
  auto fill = [&](std::vector<float>& v) {
    for (float& e : v) {
      state = state * 1664525u + 1013904223u;
      e = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
    }
  };
  std::vector<float> x(static_cast<size_t>(rows * in)), w(static_cast<size_t>(out * in)),
      dy(static_cast<size_t>(rows * out)), y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in));
  fill(x);
  fill(w);
  fill(dy);
  fill(y);  // the forward adds to what y holds (the bias)
  std::vector<float> y_part(y), dx_part(static_cast<size_t>(shard_rows * in));
  sgemm(false, true, rows, out, in, 1.0f, x.data(), in, w.data(), in, 1.0f, y.data(), out);
  sgemm(false, false, rows, in, out, 1.0f, dy.data(), out, w.data(), in, 0.0f, dx.data(), in);
  for (int64_t s = 0; s < shards; ++s) {
    float* y_s = y_part.data() + s * shard_rows * out;
    sgemm(false, true, shard_rows, out, in, 1.0f, x.data() + s * shard_rows * in, in, w.data(), in, 1.0f, y_s, out);
    sgemm(false, false, shard_rows, in, out, 1.0f, dy.data() + s * shard_rows * out, out, w.data(), in, 0.0f,
          dx_part.data(), in);
    if (std::memcmp(dx_part.data(), dx.data() + s * shard_rows * in, dx_part.size() * sizeof(float)) != 0) return false;
  }
  return std::memcmp(y_part.data(), y.data(), y.size() * sizeof(float)) == 0;
}

}  // namespace

bool sgemm_rows_independent(int64_t shard_rows, int64_t shards, int64_t out, int64_t in) {
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int>, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(shard_rows, shards, out, in, cpu_threads());
  auto it = known.find(key);
  if (it == known.end()) it = known.emplace(key, rows_independent_measured(shard_rows, shards, out, in)).first;
  return it->second;
}

void set_cpu_threads(int threads) {
  MGT_CHECK(threads >= 1, ConfigError, "cpu threads must be at least 1, got " + std::to_string(threads));
  omp_set_num_threads(threads);
}

int cpu_threads() { return omp_get_max_threads(); }

int usable_cpu_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace mgt::kernels
