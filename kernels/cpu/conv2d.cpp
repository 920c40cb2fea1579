#include "kernels/cpu/conv2d.hpp"

#include <atomic>
#include <cstdlib>
#include <new>
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

// Memory a primitive needs only while it runs, shared by every convolution of the thread that
// runs them one after another: the blocked copies of y (forward), of dy (both backward passes of
// one layer, which run back to back) and of dx, and the scratchpads. A network of N convolutions
// then holds one of each, the size of the largest, instead of N. It grows while the first step
// plans the primitives and is freed when the last convolution is.
class Workspace {
 public:
  enum Part { output_side, input_side, scratchpad, parts };
  void* get(Part part, size_t bytes) {
    Buffer& b = buffers_[part];
    if (bytes > b.bytes) {
      std::free(b.data);
      b.data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (!b.data) throw std::bad_alloc();
      b.bytes = bytes;
      b.holder = nullptr;
    }
    return b.data;
  }
  // Who last wrote a part's content that someone may read again (a layer's blocked dy).
  const void* holder(Part part) const { return buffers_[part].holder; }
  void set_holder(Part part, const void* who) { buffers_[part].holder = who; }
  void release() {
    for (Buffer& b : buffers_) {
      std::free(b.data);
      b = Buffer{};
    }
  }
  ~Workspace() { release(); }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    const void* holder = nullptr;
  };
  Buffer buffers_[parts];
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

std::atomic<int64_t> live_convolutions{0};

// One tensor argument of a primitive. The caller's data is NCHW or channel-blocked (activations)
// and OIHW (weights); the primitive is created with format_tag::any so oneDNN picks its fast
// (blocked) layout, and when that differs from the caller's the port has a buffer in that layout
// and a cached reorder. The buffer is its own (allocated once) when its content outlives the
// call, else a part of the thread's workspace, bound before each use.
struct Port {
  memory user;   // plain, data handle set per call
  memory inner;  // what the primitive reads or writes
  dnnl::primitive to_inner, to_user;
  Args to_inner_args, to_user_args;
  bool reordered = false;
  bool shares = false;  // inner is another port's buffer
  int part = -1;        // the workspace part inner lives in, or -1 for a buffer of its own

  // `share`, when it is a reordered port wanting the same layout, lends its buffer, so a tensor
  // two primitives read (x in forward and backward-weights, dy in both backward passes) is
  // reordered once per step.
  void init(const memory::desc& plain, const memory::desc& wanted, bool owned_plain = false,
            const Port* share = nullptr, int workspace_part = -1) {
    auto& eng = cpu_engine();
    user = owned_plain ? memory(plain, eng) : memory(plain, eng, nullptr);
    reordered = !(plain == wanted);
    shares = false;
    part = -1;
    if (!reordered) {
      inner = user;
      return;
    }
    shares = share && share->reordered && share->inner.get_desc() == wanted && share->part == workspace_part;
    part = workspace_part;
    inner = shares ? share->inner : part >= 0 ? memory(wanted, eng, nullptr) : memory(wanted, eng);
    to_inner = dnnl::reorder(user, inner);
    to_user = dnnl::reorder(inner, user);
    to_inner_args = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, inner}};
    to_user_args = {{DNNL_ARG_FROM, inner}, {DNNL_ARG_TO, user}};
  }
  void set(const void* p) { user.set_data_handle(const_cast<void*>(p)); }
  // Points inner at its workspace part (before the primitive or a reorder touches it).
  void bind(Workspace& ws) {
    if (reordered && part >= 0)
      inner.set_data_handle(ws.get(static_cast<Workspace::Part>(part), inner.get_desc().get_size()));
  }
  void pull() {
    if (reordered) to_inner.execute(cpu_stream(), to_inner_args);
  }
  void push() {
    if (reordered) to_user.execute(cpu_stream(), to_user_args);
  }
};

// A primitive with its argument map, whose memory objects are the ports' (handles set per call),
// and its scratchpad in the thread's workspace, so executing allocates nothing after the first
// step.
struct Bound {
  dnnl::primitive prim;
  Args args;
  memory scratchpad;
  bool ready = false;
  void run(Workspace& ws) {
    scratchpad.set_data_handle(ws.get(Workspace::scratchpad, scratchpad.get_desc().get_size()));
    prim.execute(cpu_stream(), args);
  }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// The three primitive descriptors, built as the oneDNN at hand builds them: 3.x directly, 2.x
// (Debian 12's 2.6) through an operation descriptor. bias null: none.
using ForwardPd = dnnl::convolution_forward::primitive_desc;
using BackwardDataPd = dnnl::convolution_backward_data::primitive_desc;
using BackwardWeightsPd = dnnl::convolution_backward_weights::primitive_desc;
constexpr auto kDirect = dnnl::algorithm::convolution_direct;

ForwardPd forward_pd(const memory::desc& src, const memory::desc& w, const memory::desc* bias, const memory::desc& dst,
                     const memory::dims& strides, const memory::dims& pad) {
  const auto kind = dnnl::prop_kind::forward_training;
#if DNNL_VERSION_MAJOR >= 3
  if (bias) return ForwardPd(cpu_engine(), kind, kDirect, src, w, *bias, dst, strides, pad, pad, user_scratchpad());
  return ForwardPd(cpu_engine(), kind, kDirect, src, w, dst, strides, pad, pad, user_scratchpad());
#else
  return ForwardPd(
      dnnl::convolution_forward::desc(kind, kDirect, src, w, bias ? *bias : memory::desc(), dst, strides, pad, pad),
      user_scratchpad(), cpu_engine());
#endif
}

BackwardDataPd backward_data_pd(const memory::desc& src, const memory::desc& w, const memory::desc& dst,
                                const memory::dims& strides, const memory::dims& pad, const ForwardPd& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return BackwardDataPd(cpu_engine(), kDirect, src, w, dst, strides, pad, pad, hint, user_scratchpad());
#else
  return BackwardDataPd(dnnl::convolution_backward_data::desc(kDirect, src, w, dst, strides, pad, pad),
                        user_scratchpad(), cpu_engine(), hint);
#endif
}

BackwardWeightsPd backward_weights_pd(const memory::desc& src, const memory::desc& w, const memory::desc* bias,
                                      const memory::desc& dst, const memory::dims& strides, const memory::dims& pad,
                                      const ForwardPd& hint) {
#if DNNL_VERSION_MAJOR >= 3
  if (bias)
    return BackwardWeightsPd(cpu_engine(), kDirect, src, w, *bias, dst, strides, pad, pad, hint, user_scratchpad());
  return BackwardWeightsPd(cpu_engine(), kDirect, src, w, dst, strides, pad, pad, hint, user_scratchpad());
#else
  return BackwardWeightsPd(
      dnnl::convolution_backward_weights::desc(kDirect, src, w, bias ? *bias : memory::desc(), dst, strides, pad, pad),
      user_scratchpad(), cpu_engine(), hint);
#endif
}

// The activation layout of a channel block (mgtrain/ops.hpp).
tag activation_tag(int64_t block) {
  switch (block) {
    case 1:
      return tag::nchw;
    case 8:
      return tag::nChw8c;
    case 16:
      return tag::nChw16c;
    default:
      throw Error("conv2d: no activation layout with a channel block of " + std::to_string(block));
  }
}

}  // namespace

int64_t preferred_channel_block() {
  // What oneDNN picks for a typical layer's input and output when left free (tag::any). Asked
  // once: oneDNN fixes its ISA (DNNL_MAX_CPU_ISA) for the process at its first dispatch, and every
  // CPU backend asks.
  static const int64_t block = [] {
    const memory::dims src{2, 32, 8, 8}, w{32, 32, 3, 3};
    const ForwardPd pd = forward_pd(memory::desc(src, dt::f32, tag::any), memory::desc(w, dt::f32, tag::any), nullptr,
                                    memory::desc(src, dt::f32, tag::any), {1, 1}, {1, 1});
    for (const int64_t b : {16, 8})
      if (pd.src_desc() == memory::desc(src, dt::f32, activation_tag(b)) &&
          pd.dst_desc() == memory::desc(src, dt::f32, activation_tag(b)))
        return b;
    return int64_t{1};
  }();
  return block;
}

struct Conv2d::Impl {
  int64_t input_block = 1, output_block = 1;
  Conv2dShape shape;
  int64_t batch = -1;
  bool has_bias = false;

  memory::desc src, weights, bias, dst;        // as the caller stores them
  memory::desc src_any, weights_any, dst_any;  // let oneDNN choose
  memory::dims strides, pad;
  ForwardPd fwd_pd;

  Bound fwd, bwd_data, bwd_weights;
  Port f_src, f_w, f_dst;
  Port d_dst, d_w, d_src;
  Port w_src, w_ddst, w_dw;
  memory f_bias, w_dbias;
  bool bwd_has_bias = false;
  // What the shared blocked buffers currently hold (reset by forward, which starts a step).
  const void* src_in_block = nullptr;
  const void* ddst_in_block = nullptr;

  static Bound bind(dnnl::primitive prim, const memory::desc& scratchpad_desc, Args args) {
    Bound bound{std::move(prim), std::move(args), memory(scratchpad_desc, cpu_engine(), nullptr), true};
    bound.args.emplace(DNNL_ARG_SCRATCHPAD, bound.scratchpad);
    return bound;
  }

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
    src = memory::desc(src_dims, dt::f32, activation_tag(input_block));
    weights = memory::desc(w_dims, dt::f32, tag::oihw);
    bias = memory::desc({s.out_channels}, dt::f32, tag::x);
    dst = memory::desc(dst_dims, dt::f32, activation_tag(output_block));
    src_any = memory::desc(src_dims, dt::f32, tag::any);
    weights_any = memory::desc(w_dims, dt::f32, tag::any);
    dst_any = memory::desc(dst_dims, dt::f32, tag::any);
    strides = {s.stride, s.stride};
    pad = {s.padding, s.padding};
    auto& eng = cpu_engine();
    fwd_pd = forward_pd(src_any, weights_any, with_bias ? &bias : nullptr, dst_any, strides, pad);
    // x's blocked copy is kept for backward-weights; y's is pushed to the caller at once.
    f_src.init(src, fwd_pd.src_desc());
    f_w.init(weights, fwd_pd.weights_desc());
    f_dst.init(dst, fwd_pd.dst_desc(), false, nullptr, Workspace::output_side);
    fwd = bind(dnnl::convolution_forward(fwd_pd), fwd_pd.scratchpad_desc(),
               {{DNNL_ARG_SRC, f_src.inner}, {DNNL_ARG_WEIGHTS, f_w.inner}, {DNNL_ARG_DST, f_dst.inner}});
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
  // The blocked dy from this layer's other backward pass is still in the workspace: the same dy,
  // and no other convolution has used that part since.
  bool ddst_reusable(const Workspace& ws, const float* dy) const {
    return ddst_shared() && ddst_in_block == dy && ws.holder(Workspace::output_side) == this;
  }

  void ensure(const Conv2dShape& s, int64_t b, bool with_bias) {
    if (batch != b || !(shape == s) || has_bias != with_bias || !fwd.ready) reset(s, b, with_bias);
  }

  void ensure_bwd_data() {
    if (bwd_data.ready) return;
    const BackwardDataPd pd = backward_data_pd(src_any, weights_any, dst_any, strides, pad, fwd_pd);
    d_dst.init(dst, pd.diff_dst_desc(), false, bwd_weights.ready ? &w_ddst : nullptr, Workspace::output_side);
    d_w.init(weights, pd.weights_desc());
    d_src.init(src, pd.diff_src_desc(), false, nullptr, Workspace::input_side);
    bwd_data =
        bind(dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
             {{DNNL_ARG_DIFF_DST, d_dst.inner}, {DNNL_ARG_WEIGHTS, d_w.inner}, {DNNL_ARG_DIFF_SRC, d_src.inner}});
  }

  void ensure_bwd_weights(bool with_bias) {
    if (bwd_weights.ready && bwd_has_bias == with_bias) return;
    const BackwardWeightsPd pd =
        backward_weights_pd(src_any, weights_any, with_bias ? &bias : nullptr, dst_any, strides, pad, fwd_pd);
    w_src.init(src, pd.src_desc(), false, &f_src);
    w_ddst.init(dst, pd.diff_dst_desc(), false, bwd_data.ready ? &d_dst : nullptr, Workspace::output_side);
    // oneDNN overwrites diff_weights while ours accumulate: it writes an owned plain buffer that
    // is then added into the gradient.
    w_dw.init(weights, pd.diff_weights_desc(), /*owned_plain=*/true);
    bwd_weights =
        bind(dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(),
             {{DNNL_ARG_SRC, w_src.inner}, {DNNL_ARG_DIFF_DST, w_ddst.inner}, {DNNL_ARG_DIFF_WEIGHTS, w_dw.inner}});
    if (with_bias) {
      w_dbias = memory(bias, cpu_engine());
      bwd_weights.args.emplace(DNNL_ARG_DIFF_BIAS, w_dbias);
    }
    bwd_has_bias = with_bias;
  }
};

Conv2d::Conv2d(int64_t input_block, int64_t output_block) : impl_(std::make_unique<Impl>()) {
  activation_tag(input_block);
  activation_tag(output_block);
  impl_->input_block = input_block;
  impl_->output_block = output_block;
  ++live_convolutions;
}
Conv2d::~Conv2d() {
  // The last convolution gone (a network freed), the workspace goes too.
  if (--live_convolutions == 0) thread_workspace().release();
}

void Conv2d::forward(const Conv2dShape& s, int64_t batch, const float* x, const float* w, const float* bias, float* y) {
  auto& m = *impl_;
  m.ensure(s, batch, bias != nullptr);
  m.f_src.set(x);
  m.f_w.set(w);
  m.f_dst.set(y);
  if (bias) m.f_bias.set_data_handle(const_cast<float*>(bias));
  Workspace& ws = thread_workspace();
  m.f_dst.bind(ws);
  ws.set_holder(Workspace::output_side, nullptr);
  m.f_src.pull();
  m.src_in_block = x;
  m.ddst_in_block = nullptr;
  m.f_w.pull();
  m.fwd.run(ws);
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
  Workspace& ws = thread_workspace();
  m.d_dst.bind(ws);
  m.d_src.bind(ws);
  if (!m.ddst_reusable(ws, dy)) m.d_dst.pull();
  m.ddst_in_block = dy;
  ws.set_holder(Workspace::output_side, &m);
  m.d_w.pull();
  m.bwd_data.run(ws);
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
  Workspace& ws = thread_workspace();
  m.w_ddst.bind(ws);
  if (!m.ddst_reusable(ws, dy)) m.w_ddst.pull();
  m.ddst_in_block = dy;
  ws.set_holder(Workspace::output_side, &m);
  m.bwd_weights.run(ws);
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
