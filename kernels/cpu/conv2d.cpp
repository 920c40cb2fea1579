#include "kernels/cpu/conv2d.hpp"

#include <string>
#include <unordered_map>

#include "kernels/cpu/dnnl_context.hpp"
#include "mgtrain/error.hpp"

namespace mgt::kernels {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using Args = std::unordered_map<int, memory>;

// One tensor argument of a primitive. The caller's data is plain NCHW/OIHW; the primitive is
// created with format_tag::any so oneDNN picks its fast (blocked) layout, and when that differs
// from plain the port owns a buffer in that layout (allocated once) and a cached reorder.
struct Port {
  memory user;   // plain, data handle set per call
  memory inner;  // what the primitive reads or writes
  dnnl::primitive to_inner, to_user;
  Args to_inner_args, to_user_args;
  bool reordered = false;
  bool shares = false;  // inner is another port's buffer

  // `share`, when it is a reordered port wanting the same layout, lends its buffer, so a tensor
  // two primitives read (x in forward and backward-weights, dy in both backward passes) is
  // reordered once per step.
  void init(const memory::desc& plain, const memory::desc& wanted, bool owned_plain = false,
            const Port* share = nullptr) {
    auto& eng = cpu_engine();
    user = owned_plain ? memory(plain, eng) : memory(plain, eng, nullptr);
    reordered = !(plain == wanted);
    shares = false;
    if (!reordered) {
      inner = user;
      return;
    }
    shares = share && share->reordered && share->inner.get_desc() == wanted;
    inner = shares ? share->inner : memory(wanted, eng);
    to_inner = dnnl::reorder(user, inner);
    to_user = dnnl::reorder(inner, user);
    to_inner_args = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, inner}};
    to_user_args = {{DNNL_ARG_FROM, inner}, {DNNL_ARG_TO, user}};
  }
  void set(const void* p) { user.set_data_handle(const_cast<void*>(p)); }
  void pull() {
    if (reordered) to_inner.execute(cpu_stream(), to_inner_args);
  }
  void push() {
    if (reordered) to_user.execute(cpu_stream(), to_user_args);
  }
};

// A primitive with its argument map, whose memory objects are the ports' (handles set per call),
// and its own scratchpad, so executing allocates nothing.
struct Bound {
  dnnl::primitive prim;
  Args args;
  bool ready = false;
  void run() { prim.execute(cpu_stream(), args); }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

}  // namespace

struct Conv2d::Impl {
  Conv2dShape shape;
  int64_t batch = -1;
  bool has_bias = false;

  memory::desc src, weights, bias, dst;        // plain, as the caller stores them
  memory::desc src_any, weights_any, dst_any;  // let oneDNN choose
  memory::dims strides, pad;
  dnnl::convolution_forward::primitive_desc fwd_pd;

  Bound fwd, bwd_data, bwd_weights;
  Port f_src, f_w, f_dst;
  Port d_dst, d_w, d_src;
  Port w_src, w_ddst, w_dw;
  memory f_bias, w_dbias;
  bool bwd_has_bias = false;
  // What the shared blocked buffers currently hold (reset by forward, which starts a step).
  const void* src_in_block = nullptr;
  const void* ddst_in_block = nullptr;

  void reset(const Conv2dShape& s, int64_t b, bool with_bias) {
    MGT_CHECK(s.out_height() > 0 && s.out_width() > 0, Error,
              "conv2d: input " + std::to_string(s.height) + "x" + std::to_string(s.width) + " is smaller than kernel " +
                  std::to_string(s.kernel) + " with padding " + std::to_string(s.padding));
    shape = s;
    batch = b;
    has_bias = with_bias;
    const memory::dims src_dims{b, s.in_channels, s.height, s.width};
    const memory::dims w_dims{s.out_channels, s.in_channels, s.kernel, s.kernel};
    const memory::dims dst_dims{b, s.out_channels, s.out_height(), s.out_width()};
    src = memory::desc(src_dims, dt::f32, tag::nchw);
    weights = memory::desc(w_dims, dt::f32, tag::oihw);
    bias = memory::desc({s.out_channels}, dt::f32, tag::x);
    dst = memory::desc(dst_dims, dt::f32, tag::nchw);
    src_any = memory::desc(src_dims, dt::f32, tag::any);
    weights_any = memory::desc(w_dims, dt::f32, tag::any);
    dst_any = memory::desc(dst_dims, dt::f32, tag::any);
    strides = {s.stride, s.stride};
    pad = {s.padding, s.padding};
    auto& eng = cpu_engine();
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_any,
                                      weights_any, with_bias ? bias : memory::desc(), dst_any, strides, pad, pad);
    fwd_pd = dnnl::convolution_forward::primitive_desc(d, user_scratchpad(), eng);
    f_src.init(src, fwd_pd.src_desc());
    f_w.init(weights, fwd_pd.weights_desc());
    f_dst.init(dst, fwd_pd.dst_desc());
    fwd = Bound{dnnl::convolution_forward(fwd_pd),
                {{DNNL_ARG_SRC, f_src.inner},
                 {DNNL_ARG_WEIGHTS, f_w.inner},
                 {DNNL_ARG_DST, f_dst.inner},
                 {DNNL_ARG_SCRATCHPAD, memory(fwd_pd.scratchpad_desc(), eng)}},
                true};
    if (with_bias) {
      f_bias = memory(bias, eng, nullptr);
      fwd.args.emplace(DNNL_ARG_BIAS, f_bias);
    }
    bwd_data.ready = false;
    bwd_weights.ready = false;
    src_in_block = ddst_in_block = nullptr;
  }

  // Whichever backward port was created second borrowed the other's buffer.
  bool ddst_shared() const { return (d_dst.shares && bwd_data.ready) || (w_ddst.shares && bwd_weights.ready); }

  void ensure(const Conv2dShape& s, int64_t b, bool with_bias) {
    if (batch != b || !(shape == s) || has_bias != with_bias || !fwd.ready) reset(s, b, with_bias);
  }

  void ensure_bwd_data() {
    if (bwd_data.ready) return;
    auto& eng = cpu_engine();
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, src_any, weights_any, dst_any, strides,
                                            pad, pad);
    dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad(), eng, fwd_pd);
    d_dst.init(dst, pd.diff_dst_desc(), false, bwd_weights.ready ? &w_ddst : nullptr);
    d_w.init(weights, pd.weights_desc());
    d_src.init(src, pd.diff_src_desc());
    bwd_data = Bound{dnnl::convolution_backward_data(pd),
                     {{DNNL_ARG_DIFF_DST, d_dst.inner},
                      {DNNL_ARG_WEIGHTS, d_w.inner},
                      {DNNL_ARG_DIFF_SRC, d_src.inner},
                      {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng)}},
                     true};
  }

  void ensure_bwd_weights(bool with_bias) {
    if (bwd_weights.ready && bwd_has_bias == with_bias) return;
    auto& eng = cpu_engine();
    dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, src_any, weights_any,
                                               with_bias ? bias : memory::desc(), dst_any, strides, pad, pad);
    dnnl::convolution_backward_weights::primitive_desc pd(d, user_scratchpad(), eng, fwd_pd);
    w_src.init(src, pd.src_desc(), false, &f_src);
    w_ddst.init(dst, pd.diff_dst_desc(), false, bwd_data.ready ? &d_dst : nullptr);
    // oneDNN overwrites diff_weights while ours accumulate: it writes an owned plain buffer that
    // is then added into the gradient.
    w_dw.init(weights, pd.diff_weights_desc(), /*owned_plain=*/true);
    bwd_weights = Bound{dnnl::convolution_backward_weights(pd),
                        {{DNNL_ARG_SRC, w_src.inner},
                         {DNNL_ARG_DIFF_DST, w_ddst.inner},
                         {DNNL_ARG_DIFF_WEIGHTS, w_dw.inner},
                         {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng)}},
                        true};
    if (with_bias) {
      w_dbias = memory(bias, eng);
      bwd_weights.args.emplace(DNNL_ARG_DIFF_BIAS, w_dbias);
    }
    bwd_has_bias = with_bias;
  }
};

Conv2d::Conv2d() : impl_(std::make_unique<Impl>()) {}
Conv2d::~Conv2d() = default;

void Conv2d::forward(const Conv2dShape& s, int64_t batch, const float* x, const float* w, const float* bias, float* y) {
  auto& m = *impl_;
  m.ensure(s, batch, bias != nullptr);
  m.f_src.set(x);
  m.f_w.set(w);
  m.f_dst.set(y);
  if (bias) m.f_bias.set_data_handle(const_cast<float*>(bias));
  m.f_src.pull();
  m.src_in_block = x;
  m.ddst_in_block = nullptr;
  m.f_w.pull();
  m.fwd.run();
  m.f_dst.push();
  cpu_stream().wait();
}

void Conv2d::backward_data(const Conv2dShape& s, int64_t batch, const float* dy, const float* w, float* dx) {
  auto& m = *impl_;
  if (m.batch != batch || !(m.shape == s) || !m.fwd.ready) m.reset(s, batch, m.has_bias);
  m.ensure_bwd_data();
  m.d_dst.set(dy);
  m.d_w.set(w);
  m.d_src.set(dx);
  if (!(m.ddst_shared() && m.ddst_in_block == dy)) m.d_dst.pull();
  m.ddst_in_block = dy;
  m.d_w.pull();
  m.bwd_data.run();
  m.d_src.push();
  cpu_stream().wait();
}

void Conv2d::backward_weights(const Conv2dShape& s, int64_t batch, const float* x, const float* dy, float* dw,
                              float* dbias, bool accumulate) {
  auto& m = *impl_;
  if (m.batch != batch || !(m.shape == s) || !m.fwd.ready) m.reset(s, batch, m.has_bias);
  m.ensure_bwd_weights(dbias != nullptr);
  m.w_src.set(x);
  m.w_ddst.set(dy);
  // backward follows the forward over the same input (as for every layer), so a shared blocked
  // copy of x from forward is still valid.
  if (!(m.w_src.shares && m.src_in_block == x)) m.w_src.pull();
  m.src_in_block = x;
  if (!(m.ddst_shared() && m.ddst_in_block == dy)) m.w_ddst.pull();
  m.ddst_in_block = dy;
  m.bwd_weights.run();
  m.w_dw.push();
  cpu_stream().wait();

  const auto* tw = static_cast<const float*>(m.w_dw.user.get_data_handle());
  const int64_t nw = s.out_channels * s.in_channels * s.kernel * s.kernel;
  if (accumulate) {
    for (int64_t i = 0; i < nw; ++i) dw[i] += tw[i];
  } else {
    std::copy_n(tw, nw, dw);
  }
  if (dbias) {
    const auto* tb = static_cast<const float*>(m.w_dbias.get_data_handle());
    if (accumulate) {
      for (int64_t i = 0; i < s.out_channels; ++i) dbias[i] += tb[i];
    } else {
      std::copy_n(tb, s.out_channels, dbias);
    }
  }
}

}  // namespace mgt::kernels
