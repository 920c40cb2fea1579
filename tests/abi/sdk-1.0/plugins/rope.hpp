#pragma once
// Rotary position embedding (RoPE, as Llama's) over [B, T, D] activations, written once over
// mgt::Ops: feature pair (2i, 2i + 1) of the token at position t is rotated by the angle
// t * base^(-2i / D). The cos and sin tables are computed on the host in plan() and uploaded
// (LayerPlanner::upload_array), so forward and backward are element-wise operations and one GEMM.
#include <cmath>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/layers.hpp"

namespace {

// y = x * C + (x R) * S, with C and S the cos and sin of each element's angle and R the [D, D]
// matrix that maps each pair (a, b) to (-b, a); backward: dx = dy * C + (dy * S) R^T. x R is
// exact (one +-1 term per output), so the GEMM adds no rounding.
class RopeLayer final : public mgt::Layer {
 public:
  // positions, dim: the model's window and width ([1, T, D] of the entry), for its export form.
  RopeLayer(const std::string& name, float base, int64_t positions, int64_t dim)
      : Layer(name), base_(base), positions_(positions), width_(dim) {}

  mgt::Shape output_shape(const mgt::Shape& input) const override {
    if (input.size() != 3 || input[2] % 2 != 0)
      throw mgt::ConfigError("rope takes [B, T, D] activations with D even, got " + mgt::shape_string(input));
    return input;
  }

  void plan(mgt::LayerPlanner& planner, const mgt::Shape& input) override {
    rows_ = input[0] * input[1];
    dim_ = input[2];
    std::vector<float> cos_table(rows_ * dim_), sin_table(rows_ * dim_), rotate(dim_ * dim_, 0.0f);
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t f = 0; f < dim_; ++f) {
        cos_table[r * dim_ + f] = static_cast<float>(std::cos(angle(r % input[1], f / 2, dim_)));
        sin_table[r * dim_ + f] = static_cast<float>(std::sin(angle(r % input[1], f / 2, dim_)));
      }
    for (int64_t i = 0; i < dim_; i += 2) {
      rotate[(i + 1) * dim_ + i] = -1.0f;  // output 2i gets -x[2i + 1]
      rotate[i * dim_ + i + 1] = 1.0f;     // output 2i + 1 gets x[2i]
    }
    cos_ = planner.upload_array(cos_table.data(), cos_table.size());
    sin_ = planner.upload_array(sin_table.data(), sin_table.size());
    rotate_ = planner.upload_array(rotate.data(), rotate.size());
    scratch_ = planner.allocate_array<float>(cos_table.size());
  }

  void forward(const mgt::LayerRun& run, const mgt::Tensor& in, mgt::Tensor& out) override {
    mgt::Ops& ops = run.ops;
    const int64_t n = in.numel();
    ops.gemm(false, false, rows_, dim_, dim_, 1.0f, in.data(), dim_, rotate_, dim_, 0.0f, scratch_, dim_);
    ops.binary(mgt::BinaryOp::multiply, scratch_, sin_, scratch_, n);
    ops.binary(mgt::BinaryOp::multiply, in.data(), cos_, out.data(), n);
    ops.binary(mgt::BinaryOp::add, out.data(), scratch_, out.data(), n);
  }

  void backward(const mgt::LayerRun& run, const mgt::Tensor& in, const mgt::Tensor&, const mgt::Tensor& grad_out,
                mgt::Tensor* grad_in) override {
    if (!grad_in) return;
    mgt::Ops& ops = run.ops;
    const int64_t n = in.numel();
    ops.binary(mgt::BinaryOp::multiply, grad_out.data(), sin_, scratch_, n);
    ops.gemm(false, true, rows_, dim_, dim_, 1.0f, scratch_, dim_, rotate_, dim_, 0.0f, grad_in->data(), dim_);
    ops.binary(mgt::BinaryOp::multiply, grad_out.data(), cos_, scratch_, n);
    ops.binary(mgt::BinaryOp::add, grad_in->data(), scratch_, grad_in->data(), n);
  }

  // For `mgtrain export`, the same rotation on pairs (a, b) = x viewed as [N, T, D/2, 2]:
  // (a cos - b sin, a sin + b cos) with tables [T, D/2, 1] cut to the input's T, as ONNX operators
  // over constants of the description.
  mgt::LayerDescription describe() const override {
    const int64_t half = width_ / 2;
    mgt::OnnxConstant cos_table{"cos", {positions_, half, 1}, {}, {}}, sin_table{"sin", {positions_, half, 1}, {}, {}};
    for (int64_t t = 0; t < positions_; ++t)
      for (int64_t i = 0; i < half; ++i) {
        cos_table.floats.push_back(static_cast<float>(std::cos(angle(t, i, width_))));
        sin_table.floats.push_back(static_cast<float>(std::sin(angle(t, i, width_))));
      }
    mgt::LayerDescription d;
    d.kind = mgt::LayerKind::onnx_nodes;
    d.constants = {cos_table,
                   sin_table,
                   {"zero", {1}, {}, {0}},
                   {"pairs", {4}, {}, {0, 0, half, 2}},
                   {"halves", {2}, {}, {1, 1}},
                   {"rows", {3}, {}, {0, 0, width_}}};
    mgt::OnnxNode split{"Split", {"pairs", "constant:4"}, "", {{"axis", -1}}};
    split.outputs = {"a", "b"};
    d.nodes = {{"Shape", {"x"}, "t", {{"start", 1}, {"end", 2}}},
               {"Slice", {"constant:0", "constant:2", "t", "constant:2"}, "cos"},
               {"Slice", {"constant:1", "constant:2", "t", "constant:2"}, "sin"},
               {"Reshape", {"x", "constant:3"}, "pairs"},
               split,
               {"Mul", {"a", "cos"}, "a_cos"},
               {"Mul", {"b", "sin"}, "b_sin"},
               {"Sub", {"a_cos", "b_sin"}, "first"},
               {"Mul", {"a", "sin"}, "a_sin"},
               {"Mul", {"b", "cos"}, "b_cos"},
               {"Add", {"a_sin", "b_cos"}, "second"},
               {"Concat", {"first", "second"}, "rotated", {{"axis", -1}}},
               {"Reshape", {"rotated", "constant:5"}, "y"}};
    return d;
  }

  // Uploaded tables are never saved per micro-shard, and scratch_ holds nothing from forward.
  void hints(const mgt::HintQuery&, mgt::LayerHints& hints) const override { hints.planned_memory_is_scratch = true; }

 private:
  // The angle of feature pair `pair` at position `position`: position * base^(-2 pair / dim).
  double angle(int64_t position, int64_t pair, int64_t dim) const {
    return double(position) * std::pow(double(base_), -double(2 * pair) / double(dim));
  }

  float base_;
  int64_t positions_, width_;
  int64_t rows_ = 0, dim_ = 0;
  const float *cos_ = nullptr, *sin_ = nullptr, *rotate_ = nullptr;
  float* scratch_ = nullptr;
};

}  // namespace
