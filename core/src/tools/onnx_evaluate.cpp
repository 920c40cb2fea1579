#include "tools/onnx_evaluate.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

namespace mgt::onnx_eval {

namespace {

using Dims = Shape;

// One node being run: its inputs (null where an optional one is left out), attributes and name.
struct Node {
  const onnx::NodeProto& proto;
  std::vector<const Value*> in;

  const std::string& name() const { return proto.name().empty() ? proto.output(0) : proto.name(); }
  const std::string& op() const { return proto.op_type(); }

  [[noreturn]] void fail(const std::string& why) const { throw Error("node '" + name() + "' (" + op() + "): " + why); }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Unsupported(name(), "node '" + name() + "' (" + op() + "): " + what);
  }

  const Value& input(size_t k) const {
    if (k >= in.size() || in[k] == nullptr) fail("input " + std::to_string(k) + " is missing");
    return *in[k];
  }
  const Value* optional(size_t k) const { return k < in.size() ? in[k] : nullptr; }
  const Value& floats(size_t k) const {
    const Value& v = input(k);
    if (v.int64) fail("input " + std::to_string(k) + " is int64, expected float32");
    return v;
  }

  const onnx::AttributeProto* attribute(const std::string& key) const {
    for (const auto& a : proto.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }
  int64_t int_attr(const std::string& key, int64_t fallback) const {
    const auto* a = attribute(key);
    return a ? a->i() : fallback;
  }
  float float_attr(const std::string& key, float fallback) const {
    const auto* a = attribute(key);
    return a ? a->f() : fallback;
  }
  std::string string_attr(const std::string& key, const std::string& fallback) const {
    const auto* a = attribute(key);
    return a ? a->s() : fallback;
  }
  std::vector<int64_t> ints_attr(const std::string& key) const {
    const auto* a = attribute(key);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }
  // A 1-D list of integers given as an input (an int64 tensor).
  std::vector<int64_t> int_list(size_t k) const {
    const Value& v = input(k);
    if (!v.int64) fail("input " + std::to_string(k) + " is float32, expected int64");
    return v.i;
  }
  // An axis attribute or value in [0, rank).
  int64_t axis(int64_t a, size_t rank) const {
    const auto r = static_cast<int64_t>(rank);
    if (a < -r || a >= std::max<int64_t>(r, 1))
      fail("axis " + std::to_string(a) + " is outside a tensor of rank " + std::to_string(r));
    return a < 0 ? a + r : a;
  }
};

Value float_value(Dims dims) {
  Value v;
  v.dims = std::move(dims);
  v.f.assign(static_cast<size_t>(shape_numel(v.dims)), 0.0f);
  return v;
}

Value int_value(Dims dims, std::vector<int64_t> values) {
  Value v;
  v.int64 = true;
  v.dims = std::move(dims);
  v.i = std::move(values);
  return v;
}

std::vector<int64_t> strides(const Dims& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

int64_t product(const Dims& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to; ++k) p *= dims[k];
  return p;
}

// Numpy's broadcast of two shapes.
Dims broadcast(const Node& n, const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k + a.size() >= r ? a[k + a.size() - r] : 1;
    const int64_t db = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1)
      n.fail("shapes " + shape_string(a) + " and " + shape_string(b) + " do not broadcast");
    out[k] = da == 1 ? db : da;
  }
  return out;
}

// For each element of `out` (row-major), the offset of the element of a tensor of `dims` that
// broadcasts to it.
std::vector<int64_t> broadcast_offsets(const Dims& dims, const Dims& out) {
  const size_t r = out.size();
  std::vector<int64_t> stride(r, 0);
  const std::vector<int64_t> own = strides(dims);
  for (size_t k = 0; k < dims.size(); ++k)
    if (dims[k] != 1) stride[r - dims.size() + k] = own[k];
  std::vector<int64_t> offsets(static_cast<size_t>(shape_numel(out)));
  std::vector<int64_t> index(r, 0);
  int64_t at = 0;
  for (auto& o : offsets) {
    o = at;
    for (size_t k = r; k-- > 0;) {
      at += stride[k];
      if (++index[k] < out[k]) break;
      at -= stride[k] * out[k];
      index[k] = 0;
    }
  }
  return offsets;
}

template <typename T, typename F>
std::vector<T> elementwise(const std::vector<T>& a, const Dims& da, const std::vector<T>& b, const Dims& db,
                           const Dims& out, F f) {
  std::vector<T> y(static_cast<size_t>(shape_numel(out)));
  if (da == out && db == out) {
    for (size_t k = 0; k < y.size(); ++k) y[k] = f(a[k], b[k]);
  } else if (da == out && b.size() == 1) {
    for (size_t k = 0; k < y.size(); ++k) y[k] = f(a[k], b[0]);
  } else {
    const auto oa = broadcast_offsets(da, out), ob = broadcast_offsets(db, out);
    for (size_t k = 0; k < y.size(); ++k) y[k] = f(a[static_cast<size_t>(oa[k])], b[static_cast<size_t>(ob[k])]);
  }
  return y;
}

// A binary operator over floats (and, for shape arithmetic, int64 when `fi` is given).
Value binary(const Node& n, const Value& a, const Value& b, const std::function<float(float, float)>& ff,
             const std::function<int64_t(int64_t, int64_t)>& fi = nullptr) {
  if (a.int64 != b.int64) n.fail("inputs of different types (float32 and int64)");
  Value y;
  y.dims = broadcast(n, a.dims, b.dims);
  if (a.int64) {
    if (!fi) n.unsupported("int64 inputs");
    y.int64 = true;
    y.i = elementwise(a.i, a.dims, b.i, b.dims, y.dims, fi);
  } else {
    y.f = elementwise(a.f, a.dims, b.f, b.dims, y.dims, ff);
  }
  return y;
}

Value unary(const Node& n, const std::function<float(float)>& f) {
  Value y = n.floats(0);
  for (float& v : y.f) v = f(v);
  return y;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// [.., m, k] x [.., k, n] with numpy's batch broadcast and 1-D promotion.
Value matmul(const Node& n, const Value& a0, const Value& b0) {
  Dims da = a0.dims, db = b0.dims;
  const bool a_vector = da.size() == 1, b_vector = db.size() == 1;
  if (da.empty() || db.empty()) n.fail("a scalar operand");
  if (a_vector) da.insert(da.begin(), 1);
  if (b_vector) db.push_back(1);
  const int64_t m = da[da.size() - 2], k = da.back(), k2 = db[db.size() - 2], cols = db.back();
  if (k != k2) n.fail("shapes " + shape_string(a0.dims) + " and " + shape_string(b0.dims) + " do not multiply");
  const Dims batch_a(da.begin(), da.end() - 2), batch_b(db.begin(), db.end() - 2);
  const Dims batch = broadcast(n, batch_a, batch_b);
  const auto oa = broadcast_offsets(batch_a, batch), ob = broadcast_offsets(batch_b, batch);
  Dims out = batch;
  out.push_back(m);
  out.push_back(cols);
  Value y = float_value(out);
  std::vector<double> row(static_cast<size_t>(cols));
  for (size_t bi = 0; bi < oa.size(); ++bi) {
    const float* pa = a0.f.data() + oa[bi] * m * k;
    const float* pb = b0.f.data() + ob[bi] * k * cols;
    float* py = y.f.data() + static_cast<int64_t>(bi) * m * cols;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av = pa[i * k + kk];
        const float* brow = pb + kk * cols;
        for (int64_t j = 0; j < cols; ++j) row[static_cast<size_t>(j)] += av * brow[j];
      }
      for (int64_t j = 0; j < cols; ++j) py[i * cols + j] = static_cast<float>(row[static_cast<size_t>(j)]);
    }
  }
  if (a_vector) y.dims.erase(y.dims.end() - 2);
  if (b_vector) y.dims.pop_back();
  return y;
}

Value gemm(const Node& n) {
  const Value &a = n.floats(0), &b = n.floats(1);
  if (a.dims.size() != 2 || b.dims.size() != 2) n.fail("operands of rank other than 2");
  const bool ta = n.int_attr("transA", 0) != 0, tb = n.int_attr("transB", 0) != 0;
  const double alpha = n.float_attr("alpha", 1.0f), beta = n.float_attr("beta", 1.0f);
  const int64_t m = ta ? a.dims[1] : a.dims[0], k = ta ? a.dims[0] : a.dims[1];
  const int64_t kb = tb ? b.dims[1] : b.dims[0], cols = tb ? b.dims[0] : b.dims[1];
  if (k != kb) n.fail("shapes " + shape_string(a.dims) + " and " + shape_string(b.dims) + " do not multiply");
  Value y = float_value({m, cols});
  std::vector<int64_t> oc;
  const Value* c = n.optional(2);
  if (c) {
    broadcast(n, c->dims, y.dims);
    oc = broadcast_offsets(c->dims, y.dims);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        sum +=
            static_cast<double>(ta ? a.f[kk * m + i] : a.f[i * k + kk]) * (tb ? b.f[j * k + kk] : b.f[kk * cols + j]);
      double v = alpha * sum;
      if (c) v += beta * c->f[static_cast<size_t>(oc[static_cast<size_t>(i * cols + j)])];
      y.f[static_cast<size_t>(i * cols + j)] = static_cast<float>(v);
    }
  return y;
}

// The 2-D window attributes of Conv and the poolings: kernel, strides, pads (top, left, bottom, right).
struct Window {
  int64_t kh, kw, sh, sw, pt, pl, pb, pr, dh = 1, dw = 1;
};

Window window(const Node& n, int64_t kh, int64_t kw) {
  const std::string pad = n.string_attr("auto_pad", "NOTSET");
  if (pad != "NOTSET" && pad != "VALID" && !pad.empty()) n.unsupported("auto_pad " + pad);
  if (n.int_attr("ceil_mode", 0) != 0) n.unsupported("ceil_mode 1");
  const auto kernel = n.ints_attr("kernel_shape");
  if (!kernel.empty() && (kernel.size() != 2 || (kh > 0 && (kernel[0] != kh || kernel[1] != kw))))
    n.fail("kernel_shape does not match a 2-D window of its weight");
  Window w{};
  w.kh = kernel.empty() ? kh : kernel[0];
  w.kw = kernel.empty() ? kw : kernel[1];
  if (w.kh <= 0 || w.kw <= 0) n.fail("no kernel_shape");
  auto s = n.ints_attr("strides"), p = n.ints_attr("pads"), d = n.ints_attr("dilations");
  if (s.empty()) s = {1, 1};
  if (p.empty()) p = {0, 0, 0, 0};
  if (d.empty()) d = {1, 1};
  if (s.size() != 2 || p.size() != 4 || d.size() != 2) n.unsupported("a window other than 2-D");
  w.sh = s[0];
  w.sw = s[1];
  w.pt = p[0];
  w.pl = p[1];
  w.pb = p[2];
  w.pr = p[3];
  w.dh = d[0];
  w.dw = d[1];
  if (w.sh < 1 || w.sw < 1 || w.dh < 1 || w.dw < 1) n.fail("strides and dilations must be positive");
  return w;
}

Value conv(const Node& n) {
  const Value &x = n.floats(0), &w = n.floats(1);
  if (x.dims.size() != 4 || w.dims.size() != 4) n.unsupported("a convolution other than 2-D");
  const int64_t batch = x.dims[0], c = x.dims[1], h = x.dims[2], wd = x.dims[3];
  const int64_t m = w.dims[0], cg = w.dims[1];
  const int64_t groups = n.int_attr("group", 1);
  if (groups < 1 || c != cg * groups || m % groups != 0)
    n.fail("input " + shape_string(x.dims) + " and weight " + shape_string(w.dims) + " do not fit group " +
           std::to_string(groups));
  const Window win = window(n, w.dims[2], w.dims[3]);
  const int64_t oh = (h + win.pt + win.pb - win.dh * (win.kh - 1) - 1) / win.sh + 1;
  const int64_t ow = (wd + win.pl + win.pr - win.dw * (win.kw - 1) - 1) / win.sw + 1;
  if (oh < 1 || ow < 1) n.fail("the window does not fit the input " + shape_string(x.dims));
  const Value* bias = n.optional(2);
  Value y = float_value({batch, m, oh, ow});
  const int64_t per_group = m / groups;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < m; ++o) {
      const int64_t g = o / per_group;
      for (int64_t yy = 0; yy < oh; ++yy)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double sum = bias ? bias->f[static_cast<size_t>(o)] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            const float* plane = x.f.data() + ((b * c + g * cg + ci) * h) * wd;
            const float* kernel = w.f.data() + ((o * cg + ci) * win.kh) * win.kw;
            for (int64_t ky = 0; ky < win.kh; ++ky) {
              const int64_t iy = yy * win.sh - win.pt + ky * win.dh;
              if (iy < 0 || iy >= h) continue;
              for (int64_t kx = 0; kx < win.kw; ++kx) {
                const int64_t ix = xx * win.sw - win.pl + kx * win.dw;
                if (ix < 0 || ix >= wd) continue;
                sum += static_cast<double>(plane[iy * wd + ix]) * kernel[ky * win.kw + kx];
              }
            }
          }
          y.f[static_cast<size_t>(((b * m + o) * oh + yy) * ow + xx)] = static_cast<float>(sum);
        }
    }
  return y;
}

Value pool(const Node& n, bool max) {
  const Value& x = n.floats(0);
  if (x.dims.size() != 4) n.unsupported("a pooling other than 2-D");
  if (n.proto.output_size() > 1 && !n.proto.output(1).empty()) n.unsupported("the Indices output");
  const Window win = window(n, 0, 0);
  const bool count_pad = n.int_attr("count_include_pad", 0) != 0;
  const int64_t batch = x.dims[0], c = x.dims[1], h = x.dims[2], wd = x.dims[3];
  const int64_t oh = (h + win.pt + win.pb - win.dh * (win.kh - 1) - 1) / win.sh + 1;
  const int64_t ow = (wd + win.pl + win.pr - win.dw * (win.kw - 1) - 1) / win.sw + 1;
  if (oh < 1 || ow < 1) n.fail("the window does not fit the input " + shape_string(x.dims));
  Value y = float_value({batch, c, oh, ow});
  for (int64_t p = 0; p < batch * c; ++p) {
    const float* plane = x.f.data() + p * h * wd;
    for (int64_t yy = 0; yy < oh; ++yy)
      for (int64_t xx = 0; xx < ow; ++xx) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t count = 0;
        for (int64_t ky = 0; ky < win.kh; ++ky)
          for (int64_t kx = 0; kx < win.kw; ++kx) {
            const int64_t iy = yy * win.sh - win.pt + ky * win.dh, ix = xx * win.sw - win.pl + kx * win.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= wd) {
              count += count_pad ? 1 : 0;
              continue;
            }
            const double v = plane[iy * wd + ix];
            acc = max ? std::max(acc, v) : acc + v;
            ++count;
          }
        y.f[static_cast<size_t>((p * oh + yy) * ow + xx)] =
            static_cast<float>(max ? acc : acc / std::max<int64_t>(count, 1));
      }
  }
  return y;
}

Value global_average_pool(const Node& n) {
  const Value& x = n.floats(0);
  if (x.dims.size() < 3) n.fail("input " + shape_string(x.dims) + ", expected [N, C, ...]");
  const int64_t planes = x.dims[0] * x.dims[1], size = product(x.dims, 2, x.dims.size());
  Dims out{x.dims[0], x.dims[1]};
  out.resize(x.dims.size(), 1);
  Value y = float_value(out);
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t k = 0; k < size; ++k) sum += x.f[static_cast<size_t>(p * size + k)];
    y.f[static_cast<size_t>(p)] = static_cast<float>(sum / static_cast<double>(size));
  }
  return y;
}

Value batch_normalization(const Node& n) {
  if (n.int_attr("training_mode", 0) != 0) n.unsupported("training_mode 1");
  const Value &x = n.floats(0), &scale = n.floats(1), &bias = n.floats(2), &mean = n.floats(3), &var = n.floats(4);
  if (x.dims.size() < 2) n.fail("input " + shape_string(x.dims) + ", expected [N, C, ...]");
  const int64_t c = x.dims[1], plane = product(x.dims, 2, x.dims.size());
  for (const Value* p : {&scale, &bias, &mean, &var})
    if (p->numel() != c)
      n.fail("a per-channel input of " + std::to_string(p->numel()) + " values, expected " + std::to_string(c));
  const double eps = n.float_attr("epsilon", 1e-5f);
  Value y = float_value(x.dims);
  for (int64_t b = 0; b < x.dims[0]; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t k = static_cast<size_t>(ch);
      const double inv = 1.0 / std::sqrt(static_cast<double>(var.f[k]) + eps);
      for (int64_t e = 0; e < plane; ++e) {
        const size_t at = static_cast<size_t>((b * c + ch) * plane + e);
        y.f[at] = static_cast<float>((x.f[at] - static_cast<double>(mean.f[k])) * inv * scale.f[k] + bias.f[k]);
      }
    }
  return y;
}

Value layer_normalization(const Node& n) {
  if (n.proto.output_size() > 1)
    for (int k = 1; k < n.proto.output_size(); ++k)
      if (!n.proto.output(k).empty()) n.unsupported("the Mean and InvStdDev outputs");
  const Value& x = n.floats(0);
  const auto axis = static_cast<size_t>(n.axis(n.int_attr("axis", -1), x.dims.size()));
  const int64_t rows = product(x.dims, 0, axis), cols = product(x.dims, axis, x.dims.size());
  const double eps = n.float_attr("epsilon", 1e-5f);
  Value y = float_value(x.dims);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.f.data() + r * cols;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < cols; ++k) mean += row[k];
    mean /= static_cast<double>(cols);
    for (int64_t k = 0; k < cols; ++k) var += (row[k] - mean) * (row[k] - mean);
    var /= static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t k = 0; k < cols; ++k)
      y.f[static_cast<size_t>(r * cols + k)] = static_cast<float>((row[k] - mean) * inv);
  }
  const Dims normalized(x.dims.begin() + static_cast<std::ptrdiff_t>(axis), x.dims.end());
  y = binary(n, y, n.floats(1), [](float a, float b) { return a * b; });
  if (const Value* b = n.optional(2)) y = binary(n, y, *b, [](float a, float c) { return a + c; });
  if (y.dims != x.dims) n.fail("Scale or B does not broadcast to the normalised shape " + shape_string(normalized));
  return y;
}

Value softmax(const Node& n, bool log) {
  const Value& x = n.floats(0);
  const auto axis = static_cast<size_t>(n.axis(n.int_attr("axis", -1), x.dims.size()));
  const int64_t outer = product(x.dims, 0, axis), len = x.dims[axis], inner = product(x.dims, axis + 1, x.dims.size());
  Value y = float_value(x.dims);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const auto at = [&](int64_t k) { return static_cast<size_t>((o * len + k) * inner + i); };
      double top = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < len; ++k) top = std::max(top, static_cast<double>(x.f[at(k)]));
      for (int64_t k = 0; k < len; ++k) sum += std::exp(x.f[at(k)] - top);
      for (int64_t k = 0; k < len; ++k)
        y.f[at(k)] = static_cast<float>(log ? x.f[at(k)] - top - std::log(sum) : std::exp(x.f[at(k)] - top) / sum);
    }
  return y;
}

enum class Reduction { mean, sum, max, min };

Value reduce(const Node& n, Reduction how) {
  const Value& x = n.floats(0);
  // ReduceSum takes its axes as an input since opset 13; the others as an attribute until opset 18.
  std::vector<int64_t> axes =
      n.op() == "ReduceSum" ? (n.optional(1) ? n.int_list(1) : std::vector<int64_t>{}) : n.ints_attr("axes");
  const bool keep = n.int_attr("keepdims", 1) != 0;
  if (axes.empty() && n.int_attr("noop_with_empty_axes", 0) != 0) return x;
  std::vector<char> reduced(x.dims.size(), axes.empty() ? 1 : 0);
  for (int64_t a : axes) reduced[static_cast<size_t>(n.axis(a, x.dims.size()))] = 1;
  Dims kept;
  for (size_t k = 0; k < x.dims.size(); ++k) kept.push_back(reduced[k] ? 1 : x.dims[k]);
  std::vector<double> acc(static_cast<size_t>(shape_numel(kept)),
                          how == Reduction::max   ? -std::numeric_limits<double>::infinity()
                          : how == Reduction::min ? std::numeric_limits<double>::infinity()
                                                  : 0.0);
  const auto target = broadcast_offsets(kept, x.dims);
  for (size_t k = 0; k < x.f.size(); ++k) {
    double& a = acc[static_cast<size_t>(target[k])];
    const double v = x.f[k];
    a = how == Reduction::max ? std::max(a, v) : how == Reduction::min ? std::min(a, v) : a + v;
  }
  const double count = static_cast<double>(x.numel()) / static_cast<double>(std::max<size_t>(acc.size(), 1));
  Value y;
  if (keep) {
    y.dims = kept;
  } else {
    for (size_t k = 0; k < x.dims.size(); ++k)
      if (!reduced[k]) y.dims.push_back(x.dims[k]);
  }
  for (double a : acc) y.f.push_back(static_cast<float>(how == Reduction::mean ? a / count : a));
  return y;
}

// Copies the elements of `x` at `index(k)` for each output element k: the movement operators.
template <typename F>
Value gather_elements(const Value& x, Dims out, F index) {
  Value y;
  y.int64 = x.int64;
  y.dims = std::move(out);
  const auto count = static_cast<size_t>(shape_numel(y.dims));
  if (x.int64)
    y.i.resize(count);
  else
    y.f.resize(count);
  for (size_t k = 0; k < count; ++k) {
    const auto from = static_cast<size_t>(index(static_cast<int64_t>(k)));
    if (x.int64)
      y.i[k] = x.i[from];
    else
      y.f[k] = x.f[from];
  }
  return y;
}

Value transpose(const Node& n) {
  const Value& x = n.input(0);
  const size_t r = x.dims.size();
  std::vector<int64_t> perm = n.ints_attr("perm");
  if (perm.empty())
    for (size_t k = r; k-- > 0;) perm.push_back(static_cast<int64_t>(k));
  if (perm.size() != r)
    n.fail("perm of " + std::to_string(perm.size()) + " axes for a tensor of rank " + std::to_string(r));
  Dims out(r);
  for (size_t k = 0; k < r; ++k) out[k] = x.dims[static_cast<size_t>(n.axis(perm[k], r))];
  const auto in_strides = strides(x.dims), out_strides = strides(out);
  return gather_elements(x, out, [&](int64_t k) {
    int64_t from = 0;
    for (size_t a = 0; a < r; ++a) {
      const int64_t i = (k / out_strides[a]) % out[a];
      from += i * in_strides[static_cast<size_t>(perm[a] < 0 ? perm[a] + static_cast<int64_t>(r) : perm[a])];
    }
    return from;
  });
}

Value reshape_to(Value x, Dims dims) {
  x.dims = std::move(dims);
  return x;
}

Value reshape(const Node& n) {
  const Value& x = n.input(0);
  std::vector<int64_t> shape = n.int_list(1);
  const bool allow_zero = n.int_attr("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allow_zero) {
      if (k >= x.dims.size()) n.fail("shape entry 0 at an axis the input lacks");
      shape[k] = x.dims[k];
    }
    if (shape[k] == -1) {
      if (infer >= 0) n.fail("two -1 entries in the shape");
      infer = static_cast<int64_t>(k);
    } else if (shape[k] < 0) {
      n.fail("shape entry " + std::to_string(shape[k]));
    } else {
      known *= shape[k];
    }
  }
  if (infer >= 0) shape[static_cast<size_t>(infer)] = known == 0 ? 0 : x.numel() / known;
  if (shape_numel(shape) != x.numel()) n.fail("cannot reshape " + shape_string(x.dims) + " to " + shape_string(shape));
  return reshape_to(x, shape);
}

Value flatten(const Node& n) {
  const Value& x = n.input(0);
  const int64_t a = n.int_attr("axis", 1);
  const auto axis = static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(x.dims.size()) : a);
  if (axis > x.dims.size()) n.fail("axis " + std::to_string(a) + " for rank " + std::to_string(x.dims.size()));
  return reshape_to(x, {product(x.dims, 0, axis), product(x.dims, axis, x.dims.size())});
}

Value squeeze(const Node& n, bool un) {
  const Value& x = n.input(0);
  const std::vector<int64_t> axes = n.optional(1) ? n.int_list(1) : std::vector<int64_t>{};
  Dims out;
  if (un) {
    const size_t r = x.dims.size() + axes.size();
    std::vector<char> added(r, 0);
    for (int64_t a : axes) added[static_cast<size_t>(n.axis(a, r))] = 1;
    size_t from = 0;
    for (size_t k = 0; k < r; ++k) out.push_back(added[k] ? 1 : x.dims[from++]);
  } else {
    std::vector<char> removed(x.dims.size(), 0);
    for (int64_t a : axes) removed[static_cast<size_t>(n.axis(a, x.dims.size()))] = 1;
    for (size_t k = 0; k < x.dims.size(); ++k) {
      if (axes.empty() ? x.dims[k] == 1 : removed[k]) {
        if (x.dims[k] != 1) n.fail("axis " + std::to_string(k) + " has size " + std::to_string(x.dims[k]));
        continue;
      }
      out.push_back(x.dims[k]);
    }
  }
  return reshape_to(x, out);
}

Value concat(const Node& n) {
  if (n.in.empty()) n.fail("no inputs");
  const Value& first = n.input(0);
  const auto axis = static_cast<size_t>(n.axis(n.int_attr("axis", 0), first.dims.size()));
  Dims out = first.dims;
  out[axis] = 0;
  for (size_t k = 0; k < n.in.size(); ++k) {
    const Value& v = n.input(k);
    Dims a = v.dims, b = first.dims;
    if (v.int64 != first.int64 || a.size() != b.size()) n.fail("inputs of different types or ranks");
    a[axis] = b[axis] = 0;
    if (a != b) n.fail("inputs " + shape_string(first.dims) + " and " + shape_string(v.dims) + " differ off the axis");
    out[axis] += v.dims[axis];
  }
  Value y;
  y.int64 = first.int64;
  y.dims = out;
  const int64_t outer = product(out, 0, axis), inner = product(out, axis + 1, out.size());
  for (int64_t o = 0; o < outer; ++o)
    for (const Value* v : n.in) {
      const int64_t block = v->dims[axis] * inner;
      if (v->int64)
        y.i.insert(y.i.end(), v->i.begin() + o * block, v->i.begin() + (o + 1) * block);
      else
        y.f.insert(y.f.end(), v->f.begin() + o * block, v->f.begin() + (o + 1) * block);
    }
  return y;
}

// Rows [start, start + len) along `axis`.
Value slab(const Value& x, size_t axis, int64_t start, int64_t len) {
  Dims out = x.dims;
  out[axis] = len;
  const int64_t inner = product(x.dims, axis + 1, x.dims.size()), dim = x.dims[axis];
  return gather_elements(x, out, [&](int64_t k) {
    const int64_t o = k / (len * inner), rest = k % (len * inner);
    return (o * dim + start) * inner + rest;
  });
}

std::vector<Value> split(const Node& n) {
  const Value& x = n.input(0);
  const auto axis = static_cast<size_t>(n.axis(n.int_attr("axis", 0), x.dims.size()));
  const auto parts = static_cast<int64_t>(n.proto.output_size());
  std::vector<int64_t> sizes = n.optional(1) ? n.int_list(1) : std::vector<int64_t>{};
  if (sizes.empty()) {
    if (x.dims[axis] % parts != 0)
      n.fail("cannot split " + std::to_string(x.dims[axis]) + " into " + std::to_string(parts) + " equal parts");
    sizes.assign(static_cast<size_t>(parts), x.dims[axis] / parts);
  }
  if (static_cast<int64_t>(sizes.size()) != parts ||
      std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != x.dims[axis])
    n.fail("split sizes do not add up to the axis's " + std::to_string(x.dims[axis]));
  std::vector<Value> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(slab(x, axis, at, s));
    at += s;
  }
  return out;
}

Value slice(const Node& n) {
  const Value& x = n.input(0);
  const std::vector<int64_t> starts = n.int_list(1), ends = n.int_list(2);
  std::vector<int64_t> axes = n.optional(3) ? n.int_list(3) : std::vector<int64_t>{};
  std::vector<int64_t> steps = n.optional(4) ? n.int_list(4) : std::vector<int64_t>{};
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    n.fail("starts, ends, axes and steps of different lengths");
  const size_t r = x.dims.size();
  std::vector<int64_t> first(r, 0), step(r, 1);
  Dims out = x.dims;
  for (size_t k = 0; k < starts.size(); ++k) {
    const auto a = static_cast<size_t>(n.axis(axes[k], r));
    const int64_t dim = x.dims[a], s = steps[k];
    if (s == 0) n.fail("a step of 0");
    int64_t b = starts[k] < 0 ? starts[k] + dim : starts[k], e = ends[k] < 0 ? ends[k] + dim : ends[k];
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      out[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      out[a] = b > e ? (b - e - s - 1) / -s : 0;
    }
    first[a] = b;
    step[a] = s;
  }
  const auto in_strides = strides(x.dims), out_strides = strides(out);
  return gather_elements(x, out, [&](int64_t k) {
    int64_t from = 0;
    for (size_t a = 0; a < r; ++a) from += (first[a] + ((k / out_strides[a]) % out[a]) * step[a]) * in_strides[a];
    return from;
  });
}

Value gather(const Node& n) {
  const Value& data = n.input(0);
  const Value& idx = n.input(1);
  const auto axis = static_cast<size_t>(n.axis(n.int_attr("axis", 0), data.dims.size()));
  const int64_t dim = data.dims[axis], inner = product(data.dims, axis + 1, data.dims.size());
  std::vector<int64_t> indices = idx.int64 ? idx.i : std::vector<int64_t>(idx.f.begin(), idx.f.end());
  for (int64_t& i : indices) {
    if (i < -dim || i >= dim) n.fail("index " + std::to_string(i) + " outside [0, " + std::to_string(dim) + ")");
    if (i < 0) i += dim;
  }
  Dims out(data.dims.begin(), data.dims.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), data.dims.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.dims.end());
  const auto count = static_cast<int64_t>(indices.size());
  return gather_elements(data, out, [&](int64_t k) {
    const int64_t o = k / (count * inner), rest = k % (count * inner);
    return (o * dim + indices[static_cast<size_t>(rest / inner)]) * inner + rest % inner;
  });
}

Value expand(const Node& n) {
  const Value& x = n.input(0);
  const Dims out = broadcast(n, x.dims, n.int_list(1));
  const auto offsets = broadcast_offsets(x.dims, out);
  return gather_elements(x, out, [&](int64_t k) { return offsets[static_cast<size_t>(k)]; });
}

Value shape_of(const Node& n) {
  const Value& x = n.input(0);
  const auto r = static_cast<int64_t>(x.dims.size());
  const auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t start = clampi(n.int_attr("start", 0)), end = clampi(n.int_attr("end", r));
  std::vector<int64_t> dims;
  for (int64_t k = start; k < end; ++k) dims.push_back(x.dims[static_cast<size_t>(k)]);
  const auto len = static_cast<int64_t>(dims.size());
  return int_value({len}, dims);
}

Value cast(const Node& n) {
  const Value& x = n.input(0);
  const int64_t to = n.int_attr("to", 0);
  Value y;
  y.dims = x.dims;
  if (to == onnx::TensorProto::FLOAT) {
    y.f = x.int64 ? std::vector<float>(x.i.begin(), x.i.end()) : x.f;
  } else if (to == onnx::TensorProto::INT64) {
    y.int64 = true;
    if (x.int64)
      y.i = x.i;
    else
      for (float v : x.f) y.i.push_back(static_cast<int64_t>(v));
  } else {
    n.unsupported("a cast to type " + std::to_string(to));
  }
  return y;
}

Value clip(const Node& n) {
  const Value* lo = n.optional(1);
  const Value* hi = n.optional(2);
  const float low = lo ? lo->f.at(0) : -std::numeric_limits<float>::infinity();
  const float high = hi ? hi->f.at(0) : std::numeric_limits<float>::infinity();
  return unary(n, [&](float v) { return std::min(std::max(v, low), high); });
}

// A tensor's values from raw_data, or else from its typed field. onnx::ParseData does the same, but
// it lives in libonnx, whose operator registry every rank's mgtrain would then load at start.
template <typename T, typename Typed>
void read_values(const std::string& raw, const Typed& typed, std::vector<T>& out) {
  if (raw.empty()) {
    out.assign(typed.begin(), typed.end());
    return;
  }
  out.resize(raw.size() / sizeof(T));
  std::memcpy(out.data(), raw.data(), out.size() * sizeof(T));
}

// A tensor held in an initializer or a Constant's attribute.
Value tensor_value(const onnx::TensorProto& t, const std::string& where) {
  Value v;
  v.dims.assign(t.dims().begin(), t.dims().end());
  const auto count = static_cast<size_t>(shape_numel(v.dims));
  const std::string& raw = t.raw_data();
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      read_values(raw, t.float_data(), v.f);
      if (v.f.size() != count) break;
      return v;
    case onnx::TensorProto::INT64:
      v.int64 = true;
      read_values(raw, t.int64_data(), v.i);
      if (v.i.size() != count) break;
      return v;
    default:
      throw Unsupported(where, "tensor '" + t.name() + "' of data type " + std::to_string(t.data_type()));
  }
  throw Error("tensor '" + t.name() + "' holds another number of values than its shape " + shape_string(v.dims));
}

Value constant(const Node& n) {
  if (const auto* a = n.attribute("value")) return tensor_value(a->t(), n.name());
  if (const auto* a = n.attribute("value_float")) return reshape_to(Value{false, {}, {a->f()}, {}}, {});
  if (const auto* a = n.attribute("value_int")) return int_value({}, {a->i()});
  if (const auto* a = n.attribute("value_floats")) {
    Value v;
    v.f.assign(a->floats().begin(), a->floats().end());
    v.dims = {static_cast<int64_t>(v.f.size())};
    return v;
  }
  if (const auto* a = n.attribute("value_ints"))
    return int_value({a->ints_size()}, {a->ints().begin(), a->ints().end()});
  n.unsupported("a Constant other than value, value_float(s) or value_int(s)");
}

using Op = std::function<std::vector<Value>(const Node&)>;

Op one(std::function<Value(const Node&)> f) {
  return [f = std::move(f)](const Node& n) { return std::vector<Value>{f(n)}; };
}

Op elementwise_op(std::function<float(float)> f) {
  return one([f = std::move(f)](const Node& n) { return unary(n, f); });
}

// Max and Min take any number of inputs.
Op folded(std::function<float(float, float)> ff, std::function<int64_t(int64_t, int64_t)> fi = nullptr) {
  return one([ff = std::move(ff), fi = std::move(fi)](const Node& n) {
    Value y = n.input(0);
    for (size_t k = 1; k < n.in.size(); ++k) y = binary(n, y, n.input(k), ff, fi);
    return y;
  });
}

const std::map<std::string, Op>& table() {
  static const std::map<std::string, Op> ops = [] {
    std::map<std::string, Op> t;
    t["Add"] = folded(std::plus<float>(), std::plus<int64_t>());
    t["Sub"] = folded(std::minus<float>(), std::minus<int64_t>());
    t["Mul"] = folded(std::multiplies<float>(), std::multiplies<int64_t>());
    t["Div"] = one([](const Node& n) {
      return binary(n, n.input(0), n.input(1), std::divides<float>(), [&n](int64_t a, int64_t b) -> int64_t {
        if (b == 0) n.fail("an integer division by 0");
        return a / b;
      });
    });
    t["Pow"] = one([](const Node& n) {
      return binary(n, n.floats(0), n.floats(1), [](float a, float b) { return std::pow(a, b); });
    });
    t["Max"] =
        folded([](float a, float b) { return std::max(a, b); }, [](int64_t a, int64_t b) { return std::max(a, b); });
    t["Min"] =
        folded([](float a, float b) { return std::min(a, b); }, [](int64_t a, int64_t b) { return std::min(a, b); });
    t["Relu"] = elementwise_op([](float v) { return v > 0 ? v : 0.0f; });
    t["Tanh"] = elementwise_op([](float v) { return std::tanh(v); });
    t["Sigmoid"] = elementwise_op(sigmoid);
    t["Exp"] = elementwise_op([](float v) { return std::exp(v); });
    t["Log"] = elementwise_op([](float v) { return std::log(v); });
    t["Sqrt"] = elementwise_op([](float v) { return std::sqrt(v); });
    t["Reciprocal"] = elementwise_op([](float v) { return 1.0f / v; });
    t["Neg"] = elementwise_op([](float v) { return -v; });
    t["Abs"] = elementwise_op([](float v) { return std::fabs(v); });
    t["Erf"] = elementwise_op([](float v) { return std::erf(v); });
    t["Sin"] = elementwise_op([](float v) { return std::sin(v); });
    t["Cos"] = elementwise_op([](float v) { return std::cos(v); });
    t["Floor"] = elementwise_op([](float v) { return std::floor(v); });
    t["Ceil"] = elementwise_op([](float v) { return std::ceil(v); });
    t["Softplus"] = elementwise_op([](float v) { return std::log1p(std::exp(-std::fabs(v))) + std::max(v, 0.0f); });
    t["HardSwish"] = elementwise_op([](float v) { return v * std::min(std::max(v / 6.0f + 0.5f, 0.0f), 1.0f); });
    t["LeakyRelu"] = one([](const Node& n) {
      const float alpha = n.float_attr("alpha", 0.01f);
      return unary(n, [alpha](float v) { return v >= 0 ? v : alpha * v; });
    });
    t["Elu"] = one([](const Node& n) {
      const float alpha = n.float_attr("alpha", 1.0f);
      return unary(n, [alpha](float v) { return v >= 0 ? v : alpha * (std::exp(v) - 1.0f); });
    });
    t["HardSigmoid"] = one([](const Node& n) {
      const float alpha = n.float_attr("alpha", 0.2f), beta = n.float_attr("beta", 0.5f);
      return unary(n, [=](float v) { return std::min(std::max(alpha * v + beta, 0.0f), 1.0f); });
    });
    t["Clip"] = one(clip);
    t["Identity"] = one([](const Node& n) { return n.input(0); });
    t["Dropout"] = one([](const Node& n) {
      if (n.proto.output_size() > 1 && !n.proto.output(1).empty()) n.unsupported("the mask output");
      if (const Value* training = n.optional(2); training && (training->int64 ? training->i.at(0) : training->f.at(0)))
        n.unsupported("training mode");
      return n.input(0);
    });
    t["MatMul"] = one([](const Node& n) { return matmul(n, n.floats(0), n.floats(1)); });
    t["Gemm"] = one(gemm);
    t["Conv"] = one(conv);
    t["MaxPool"] = one([](const Node& n) { return pool(n, true); });
    t["AveragePool"] = one([](const Node& n) { return pool(n, false); });
    t["GlobalAveragePool"] = one(global_average_pool);
    t["BatchNormalization"] = one(batch_normalization);
    t["LayerNormalization"] = one(layer_normalization);
    t["Softmax"] = one([](const Node& n) { return softmax(n, false); });
    t["LogSoftmax"] = one([](const Node& n) { return softmax(n, true); });
    t["ReduceMean"] = one([](const Node& n) { return reduce(n, Reduction::mean); });
    t["ReduceSum"] = one([](const Node& n) { return reduce(n, Reduction::sum); });
    t["ReduceMax"] = one([](const Node& n) { return reduce(n, Reduction::max); });
    t["ReduceMin"] = one([](const Node& n) { return reduce(n, Reduction::min); });
    t["Transpose"] = one(transpose);
    t["Reshape"] = one(reshape);
    t["Flatten"] = one(flatten);
    t["Squeeze"] = one([](const Node& n) { return squeeze(n, false); });
    t["Unsqueeze"] = one([](const Node& n) { return squeeze(n, true); });
    t["Concat"] = one(concat);
    t["Split"] = split;
    t["Slice"] = one(slice);
    t["Gather"] = one(gather);
    t["Expand"] = one(expand);
    t["Shape"] = one(shape_of);
    t["Cast"] = one(cast);
    t["Constant"] = one(constant);
    return t;
  }();
  return ops;
}

}  // namespace

std::vector<std::string> operators() {
  std::vector<std::string> names;
  for (const auto& [name, op] : table()) names.push_back(name);
  return names;
}

std::map<std::string, Value> run(const onnx::GraphProto& graph, const std::map<std::string, Value>& inputs,
                                 const std::set<std::string>& wanted) {
  // The last node that reads each tensor: what no later node reads (and is not wanted) is freed.
  std::map<std::string, int> last_use;
  for (int k = 0; k < graph.node_size(); ++k)
    for (const auto& name : graph.node(k).input()) last_use[name] = k;

  std::map<std::string, Value> values;
  for (const auto& [name, v] : inputs) values[name] = v;
  for (const auto& t : graph.initializer())
    if (last_use.count(t.name()) || wanted.count(t.name())) values[t.name()] = tensor_value(t, t.name());
  for (const auto& in : graph.input())
    if (!values.count(in.name())) throw Error("the graph's input '" + in.name() + "' was not given");

  const auto& ops = table();
  for (int k = 0; k < graph.node_size(); ++k) {
    const onnx::NodeProto& proto = graph.node(k);
    Node node{proto, {}};
    if (!proto.domain().empty() && proto.domain() != "ai.onnx")
      node.unsupported("operator domain '" + proto.domain() + "'");
    const auto op = ops.find(proto.op_type());
    if (op == ops.end()) node.unsupported("operator " + proto.op_type());
    for (const auto& name : proto.input()) {
      if (name.empty()) {
        node.in.push_back(nullptr);
        continue;
      }
      const auto it = values.find(name);
      if (it == values.end()) node.fail("reads '" + name + "', which no earlier node or initializer gives");
      node.in.push_back(&it->second);
    }
    std::vector<Value> out = op->second(node);
    for (size_t o = 0; o < out.size() && o < static_cast<size_t>(proto.output_size()); ++o)
      if (!proto.output(static_cast<int>(o)).empty()) values[proto.output(static_cast<int>(o))] = std::move(out[o]);
    for (const auto& name : proto.input())
      if (last_use[name] == k && !wanted.count(name)) values.erase(name);
  }
  std::map<std::string, Value> result;
  for (const auto& name : wanted) {
    const auto it = values.find(name);
    if (it == values.end()) throw Error("the graph gives no tensor '" + name + "'");
    result[name] = std::move(it->second);
  }
  return result;
}

}  // namespace mgt::onnx_eval
