// A preloaded library that times every dnnl_sgemm call of the process it is loaded into and, at
// exit, prints the time per GEMM shape: where a step's GEMM time goes and at what rate, which a
// sampling profiler cannot say (oneDNN's JIT kernels have no frames to unwind to their callers).
//
//   LD_PRELOAD=build/lib/libsgemm_shapes.so build/bin/mgtrain bench --config C --steps N
//
// Per shape (transposes, m, n, k, leading dimensions): calls, total ms and GFLOP/s; then the
// total, on stderr, one table per process. Two clock reads a call (tens of ns, against calls of
// microseconds). Built by benchmarks/profile_gpt.sh.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "oneapi/dnnl/dnnl.h"

namespace {

using Shape = std::tuple<char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t>;
struct Totals {
  long long calls = 0;
  double seconds = 0;
};
using SgemmFunction = dnnl_status_t (*)(char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float, const float*, dnnl_dim_t,
                                        const float*, dnnl_dim_t, float, float*, dnnl_dim_t);

struct Table {
  std::mutex mutex;
  std::map<Shape, Totals> shapes;

  ~Table() {
    std::vector<std::pair<Shape, Totals>> rows(shapes.begin(), shapes.end());
    if (rows.empty()) return;
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double seconds = 0, flops = 0;
    long long calls = 0;
    std::fprintf(stderr, "sgemm_shapes (pid %d): %-5s %6s %6s %6s %5s %5s %5s %9s %10s %8s\n",
                 static_cast<int>(getpid()), "op", "m", "n", "k", "lda", "ldb", "ldc", "calls", "ms", "GFLOP/s");
    for (const auto& [s, t] : rows) {
      const auto& [ta, tb, m, n, k, lda, ldb, ldc] = s;
      const double f = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * t.calls;
      std::fprintf(stderr, "sgemm_shapes (pid %d): %c%c    %6lld %6lld %6lld %5lld %5lld %5lld %9lld %10.2f %8.1f\n",
                   static_cast<int>(getpid()), ta, tb, static_cast<long long>(m), static_cast<long long>(n),
                   static_cast<long long>(k), static_cast<long long>(lda), static_cast<long long>(ldb),
                   static_cast<long long>(ldc), t.calls, 1e3 * t.seconds, f / t.seconds / 1e9);
      seconds += t.seconds;
      flops += f;
      calls += t.calls;
    }
    std::fprintf(stderr, "sgemm_shapes (pid %d): total %lld calls, %.2f ms, %.3f GFLOP, %.1f GFLOP/s\n",
                 static_cast<int>(getpid()), calls, 1e3 * seconds, flops / 1e9, flops / seconds / 1e9);
  }
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

extern "C" dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t m, dnnl_dim_t n, dnnl_dim_t k, float alpha,
                                    const float* a, dnnl_dim_t lda, const float* b, dnnl_dim_t ldb, float beta,
                                    float* c, dnnl_dim_t ldc) {
  static const auto real = reinterpret_cast<SgemmFunction>(dlsym(RTLD_NEXT, "dnnl_sgemm"));
  Table& t = table();  // made before the first call is timed, destroyed at exit
  const auto start = std::chrono::steady_clock::now();
  const dnnl_status_t status = real(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::lock_guard<std::mutex> lock(t.mutex);
  Totals& totals = t.shapes[Shape{transa, transb, m, n, k, lda, ldb, ldc}];
  ++totals.calls;
  totals.seconds += seconds;
  return status;
}
