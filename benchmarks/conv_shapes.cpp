// Each convolution shape of a model's training step, timed two ways on one thread: oneDNN's own
// best for that shape alone (forward, backward-data and backward-weights primitives with every
// tensor kept in the layout oneDNN chose, so no reorders) and mgtrain's CPU convolution
// (kernels/cpu/conv2d) on activations in the layouts the step keeps them in: the CPU's channel
// block between convolutional layers, NCHW at the model's input and before a Flatten. Per shape: calls
// per step, the median milliseconds of one forward + backward (all three passes) each way, and
// their ratio, and the rate mgtrain's reaches in GFLOP/s; then the step's totals at those times,
// and what share of this core's fused multiply-add peak (measured here, at the widest vector
// oneDNN is allowed: DNNL_MAX_CPU_ISA) the convolutions reach. The last line is JSON.
//
// The peak bounds any framework that convolves directly: a step cannot take less than its
// convolutions' multiply-adds at that rate, so a peer's step time over this step's convolution
// time is the most a faster framework could gain on it.
//
// Usage: conv_shapes [resnet|cnn] [BATCH=64]   (BATCH: one rank's samples, 64 at np=2 with the
// examples' global batch of 128). Built and run by benchmarks/conv_shapes.sh.
#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/conv2d.hpp"
#include "oneapi/dnnl/dnnl.hpp"

namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

struct Shape {
  mgt::Conv2dShape conv;
  int64_t calls;                                 // per training step of one rank
  bool nchw_input = false, nchw_output = false;  // the model's input; an output a Flatten reads
  // The stem: no layer before it takes a gradient, so the step runs no backward-data pass.
  bool input_gradient() const { return !nchw_input; }
  // Floating-point operations of one forward + backward as the step runs it (2 per multiply-add).
  double flops(int64_t batch) const {
    const double one_pass = 2.0 * static_cast<double>(batch * conv.out_channels * conv.out_height() * conv.out_width() *
                                                      conv.in_channels * conv.kernel * conv.kernel);
    return one_pass * (input_gradient() ? 3 : 2);
  }
};

std::vector<Shape> shapes_of(const std::string& model) {
  const auto conv = [](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t hw) {
    mgt::Conv2dShape s;
    s.in_channels = in, s.out_channels = out, s.kernel = k, s.stride = stride, s.padding = pad, s.height = hw,
    s.width = hw;
    return s;
  };
  if (model == "cnn")  // examples/fashion_mnist_cnn.ini: two 3x3 convolutions, 2x2 max pooling after each
    return {{conv(1, 32, 3, 1, 1, 28), 1, true, false}, {conv(32, 64, 3, 1, 1, 14), 1, false, true}};
  // ResNet-20 at width 16 on 28x28 (plugins/models/resnet): the stem, three stages of three
  // blocks of two 3x3 convolutions, stages 2 and 3 opening with stride 2 and a 1x1 projection.
  return {{conv(1, 16, 3, 1, 1, 28), 1, true}, {conv(16, 16, 3, 1, 1, 28), 6}, {conv(16, 32, 3, 2, 1, 28), 1},
          {conv(16, 32, 1, 2, 0, 28), 1},      {conv(32, 32, 3, 1, 1, 14), 5}, {conv(32, 64, 3, 2, 1, 14), 1},
          {conv(32, 64, 1, 2, 0, 14), 1},      {conv(64, 64, 3, 1, 1, 7), 5}};
}

// Median seconds of fn over batches of calls of about 20 ms each.
double median_seconds(const std::function<void()>& fn) {
  fn();  // plans, JITs, first-touches
  const auto once_start = Clock::now();
  fn();
  const double once = std::chrono::duration<double>(Clock::now() - once_start).count();
  const int per_batch = std::max(1, static_cast<int>(0.02 / std::max(once, 1e-7)));
  std::vector<double> samples;
  for (int s = 0; s < 9; ++s) {
    const auto start = Clock::now();
    for (int i = 0; i < per_batch; ++i) fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count() / per_batch);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

std::vector<float> filled(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i % 17) - 8) * scale;
  return v;
}

// The core's fused multiply-add peak in FLOP/s at one vector width: twelve independent
// accumulators cover an FMA's latency on two ports, so the loop is bound by throughput alone.
// A macro, not a template: the loop must be compiled for the target it times.
constexpr int kPeakAccumulators = 12, kPeakIterations = 1 << 16;
#define MGT_FMA_PEAK_LOOP(Vector, set1, fmadd, first_lane)                                                    \
  Vector acc[kPeakAccumulators];                                                                              \
  for (Vector & a : acc) a = set1(1.0f);                                                                      \
  const Vector scale = set1(0.999999f), step = set1(1e-7f);                                                   \
  for (int i = 0; i < kPeakIterations; ++i) {                                                                 \
    _Pragma("GCC unroll 12") for (int a = 0; a < kPeakAccumulators; ++a) acc[a] = fmadd(acc[a], scale, step); \
  }                                                                                                           \
  float sum = 0;                                                                                              \
  for (const Vector& a : acc) sum += first_lane(a);                                                           \
  return sum

__attribute__((target("avx2,fma"))) float fma_loop_avx2() {
  MGT_FMA_PEAK_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_cvtss_f32);
}
__attribute__((target("avx512f"))) float fma_loop_avx512() {
  MGT_FMA_PEAK_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_cvtss_f32);
}

double fma_peak(float (*loop)(), int lanes) {
  volatile float sink = 0;  // the loop's result is kept, so it is not dropped
  const double seconds = median_seconds([&] { sink = sink + loop(); });
  return 2.0 * lanes * kPeakAccumulators * kPeakIterations / seconds;
}

// The peak at the widest vector oneDNN uses here (AVX-512 or AVX2; 0 below AVX2).
double fma_peak_for_onednn(std::string& isa) {
  const auto bits = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  if ((bits & static_cast<unsigned>(dnnl_cpu_isa_avx512_core)) == static_cast<unsigned>(dnnl_cpu_isa_avx512_core)) {
    isa = "AVX-512";
    return fma_peak(fma_loop_avx512, 16);
  }
  if ((bits & static_cast<unsigned>(dnnl_cpu_isa_avx2)) == static_cast<unsigned>(dnnl_cpu_isa_avx2)) {
    isa = "AVX2";
    return fma_peak(fma_loop_avx2, 8);
  }
  isa = "below AVX2";
  return 0;
}

// oneDNN alone: the three primitives on tensors in the layouts they chose, bias included as the
// layer has it (conv2d layers carry a bias).
double onednn_best(const Shape& shape, int64_t batch) {
  const mgt::Conv2dShape& s = shape.conv;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::dims src_dims{batch, s.in_channels, s.height, s.width},
      w_dims{s.out_channels, s.in_channels, s.kernel, s.kernel}, b_dims{s.out_channels},
      dst_dims{batch, s.out_channels, s.out_height(), s.out_width()}, strides{s.stride, s.stride},
      pad{s.padding, s.padding};
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const memory::desc src_any(src_dims, dt::f32, tag::any), w_any(w_dims, dt::f32, tag::any),
      b_desc(b_dims, dt::f32, tag::x), dst_any(dst_dims, dt::f32, tag::any);
  const auto fwd_kind = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  dnnl::convolution_forward::primitive_desc fwd_pd(eng, fwd_kind, algo, src_any, w_any, b_desc, dst_any, strides, pad,
                                                   pad);
  dnnl::convolution_backward_data::primitive_desc bwd_d_pd(eng, algo, src_any, w_any, dst_any, strides, pad, pad,
                                                           fwd_pd);
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd(eng, algo, src_any, w_any, b_desc, dst_any, strides, pad,
                                                              pad, fwd_pd);
#else
  dnnl::convolution_forward::primitive_desc fwd_pd(
      dnnl::convolution_forward::desc(fwd_kind, algo, src_any, w_any, b_desc, dst_any, strides, pad, pad), eng);
  dnnl::convolution_backward_data::primitive_desc bwd_d_pd(
      dnnl::convolution_backward_data::desc(algo, src_any, w_any, dst_any, strides, pad, pad), eng, fwd_pd);
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd(
      dnnl::convolution_backward_weights::desc(algo, src_any, w_any, b_desc, dst_any, strides, pad, pad), eng, fwd_pd);
#endif
  // Each tensor once, in the layout its users chose (where the passes disagree, the reorder
  // would be the step's cost, so it is not oneDNN's best: they are given their own copies).
  memory src(fwd_pd.src_desc(), eng), w(fwd_pd.weights_desc(), eng), b(b_desc, eng), dst(fwd_pd.dst_desc(), eng);
  memory ddst_d(bwd_d_pd.diff_dst_desc(), eng), w_d(bwd_d_pd.weights_desc(), eng), dsrc(bwd_d_pd.diff_src_desc(), eng);
  memory src_w(bwd_w_pd.src_desc(), eng), ddst_w(bwd_w_pd.diff_dst_desc(), eng), dw(bwd_w_pd.diff_weights_desc(), eng),
      db(b_desc, eng);
  for (memory* m : {&src, &w, &b, &ddst_d, &w_d, &src_w, &ddst_w}) {
    auto* p = static_cast<float*>(m->get_data_handle());
    const auto v = filled(m->get_desc().get_size() / sizeof(float), 0.01f);
    std::copy(v.begin(), v.end(), p);
  }
  dnnl::convolution_forward fwd(fwd_pd);
  dnnl::convolution_backward_data bwd_d(bwd_d_pd);
  dnnl::convolution_backward_weights bwd_w(bwd_w_pd);
  return median_seconds([&] {
    fwd.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}});
    if (shape.input_gradient())
      bwd_d.execute(stream, {{DNNL_ARG_DIFF_DST, ddst_d}, {DNNL_ARG_WEIGHTS, w_d}, {DNNL_ARG_DIFF_SRC, dsrc}});
    const std::unordered_map<int, memory> weights_args = {
        {DNNL_ARG_SRC, src_w}, {DNNL_ARG_DIFF_DST, ddst_w}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}};
    bwd_w.execute(stream, weights_args);
    stream.wait();
  });
}

// mgtrain's convolution as a conv2d layer calls it in a step, its activations in the step's layouts.
double mgtrain_conv(const Shape& shape, int64_t batch) {
  const mgt::Conv2dShape& s = shape.conv;
  const int64_t block = mgt::kernels::preferred_channel_block();
  const auto layout = [&](bool nchw, int64_t channels) { return nchw || channels % block != 0 ? 1 : block; };
  mgt::kernels::Conv2d conv(layout(shape.nchw_input, s.in_channels), layout(shape.nchw_output, s.out_channels));
  const auto x = filled(static_cast<size_t>(batch * s.in_channels * s.height * s.width), 0.01f);
  const auto w = filled(static_cast<size_t>(s.out_channels * s.in_channels * s.kernel * s.kernel), 0.01f);
  const auto b = filled(static_cast<size_t>(s.out_channels), 0.01f);
  const size_t ny = static_cast<size_t>(batch * s.out_channels * s.out_height() * s.out_width());
  std::vector<float> y(ny), dx(x.size()), dw(w.size()), db(b.size());
  const auto dy = filled(ny, 0.01f);
  return median_seconds([&] {
    conv.forward(s, batch, x.data(), w.data(), b.data(), y.data());
    if (shape.input_gradient()) conv.backward_data(s, batch, dy.data(), w.data(), dx.data());
    conv.backward_weights(s, batch, x.data(), dy.data(), dw.data(), db.data(), false);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "resnet";
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 64;
  if ((model != "resnet" && model != "cnn") || batch <= 0) {
    std::fprintf(stderr, "usage: conv_shapes [resnet|cnn] [BATCH > 0]\n");
    return 2;
  }
  omp_set_num_threads(1);  // one rank's one thread
  const dnnl::version_t* v = dnnl::version();
  std::printf("oneDNN %d.%d.%d, %s, batch %lld\n", v->major, v->minor, v->patch, model.c_str(),
              static_cast<long long>(batch));
  std::printf("%-24s %5s %12s %12s %7s %8s\n", "shape (in>out kK sS HxW)", "calls", "oneDNN ms", "mgtrain ms", "ratio",
              "GFLOP/s");
  double best_total = 0, ours_total = 0, worst = 0, step_flops = 0;
  for (const Shape& shape : shapes_of(model)) {
    const auto& s = shape.conv;
    const double best = onednn_best(shape, batch), ours = mgtrain_conv(shape, batch);
    char name[64];
    std::snprintf(name, sizeof name, "%lld>%lld k%lld s%lld %lldx%lld", static_cast<long long>(s.in_channels),
                  static_cast<long long>(s.out_channels), static_cast<long long>(s.kernel),
                  static_cast<long long>(s.stride), static_cast<long long>(s.height), static_cast<long long>(s.width));
    std::printf("%-24s %5lld %12.3f %12.3f %6.2fx %8.1f\n", name, static_cast<long long>(shape.calls), 1e3 * best,
                1e3 * ours, ours / best, 1e-9 * shape.flops(batch) / ours);
    best_total += best * static_cast<double>(shape.calls);
    ours_total += ours * static_cast<double>(shape.calls);
    step_flops += shape.flops(batch) * static_cast<double>(shape.calls);
    worst = std::max(worst, ours / best);
  }
  std::printf("%-24s %5s %12.3f %12.3f %6.2fx %8.1f\n", "step", "", 1e3 * best_total, 1e3 * ours_total,
              ours_total / best_total, 1e-9 * step_flops / ours_total);
  std::string isa;
  const double peak = fma_peak_for_onednn(isa);
  const double peak_ms = peak > 0 ? 1e3 * step_flops / peak : 0;
  std::printf(
      "%s FMA peak of one core: %.1f GFLOP/s; the step's %.2f GFLOP of convolutions take %.1f ms at it "
      "(mgtrain's at %.0f%% of it)\n",
      isa.c_str(), 1e-9 * peak, 1e-9 * step_flops, peak_ms, peak > 0 ? 100.0 * peak_ms / (1e3 * ours_total) : 0);
  std::printf(
      "{\"model\":\"%s\",\"batch\":%lld,\"onednn\":\"%d.%d.%d\",\"onednn_ms\":%.4f,\"mgtrain_ms\":%.4f,"
      "\"worst_ratio\":%.3f,\"isa\":\"%s\",\"peak_gflops\":%.2f,\"step_gflop\":%.4f,\"ms_at_peak\":%.4f}\n",
      model.c_str(), static_cast<long long>(batch), v->major, v->minor, v->patch, 1e3 * best_total, 1e3 * ours_total,
      worst, isa.c_str(), 1e-9 * peak, 1e-9 * step_flops, peak_ms);
}
