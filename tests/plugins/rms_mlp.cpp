// A model with an RMSNorm layer of a plugin's own, y = x / sqrt(mean(x^2) + eps) over each row,
// written over mgt::Ops, that describes itself for export as five ONNX operators. With
// model.export_eps = false its description leaves eps out, as a new plugin author's did: the graph
// is then wrong by a fraction of a percent, and `mgtrain export` must refuse it naming the layer
// (tests/e2e/onnx_export.sh, case check). eps defaults to 0.01, large enough that leaving it out
// shows beyond the check's tolerance on Fashion-MNIST.
#include <cstdio>
#include <vector>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::positive_integer, "64", "width of the hidden layer"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
    {"model.eps", mgt::KeyType::positive_real, "0.01", "the RMSNorm's epsilon, added to the mean square"},
    {"model.export_eps", mgt::KeyType::boolean, "true",
     "the RMSNorm's export form adds eps (false: a wrong description, without it)"},
};

// Over [rows, dim]: r = (mean(x^2) + eps)^-1/2 per row, y = x r; dx = r dy - x r^3 mean(x dy).
class RmsNorm final : public mgt::Layer {
 public:
  RmsNorm(const std::string& name, float eps, bool export_eps) : Layer(name), eps_(eps), export_eps_(export_eps) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override {
    MGT_CHECK(input.size() == 2, mgt::ConfigError,
              "layer '" + name() + "' expects [rows, dim], got " + mgt::shape_string(input));
    return input;
  }
  void plan(mgt::LayerPlanner& planner, const mgt::Shape& input) override {
    rows_ = input[0];
    dim_ = input[1];
    const auto n = static_cast<size_t>(rows_ * dim_), r = static_cast<size_t>(rows_);
    wide_ = planner.allocate_array<float>(n);
    spread_ = planner.allocate_array<float>(n);
    inverse_ = planner.allocate_array<float>(r);  // kept from forward for backward
    row_ = planner.allocate_array<float>(r);
    const std::vector<float> ones(static_cast<size_t>(dim_), 1.0f);
    ones_ = planner.upload_array(ones.data(), ones.size());
  }
  void forward(const mgt::LayerRun& run, const mgt::Tensor& in, mgt::Tensor& out) override {
    mgt::Ops& ops = run.ops;
    const int64_t n = rows_ * dim_;
    ops.unary(mgt::UnaryOp::square, in.data(), wide_, n);
    row_mean(ops, wide_, row_);  // mean(x^2)
    ops.affine(row_, row_, rows_, 1.0f, eps_);
    ops.unary(mgt::UnaryOp::sqrt, row_, row_, rows_);
    ops.unary(mgt::UnaryOp::reciprocal, row_, inverse_, rows_);
    spread(ops, inverse_, spread_);
    ops.binary(mgt::BinaryOp::multiply, in.data(), spread_, out.data(), n);
  }
  void backward(const mgt::LayerRun& run, const mgt::Tensor& in, const mgt::Tensor&, const mgt::Tensor& grad_out,
                mgt::Tensor* grad_in) override {
    if (!grad_in) return;
    mgt::Ops& ops = run.ops;
    const int64_t n = rows_ * dim_;
    ops.binary(mgt::BinaryOp::multiply, in.data(), grad_out.data(), wide_, n);
    row_mean(ops, wide_, row_);                                                                    // mean(x dy)
    for (int k = 0; k < 3; ++k) ops.binary(mgt::BinaryOp::multiply, row_, inverse_, row_, rows_);  // r^3 mean(x dy)
    spread(ops, row_, wide_);
    ops.binary(mgt::BinaryOp::multiply, in.data(), wide_, wide_, n);
    spread(ops, inverse_, spread_);
    ops.binary(mgt::BinaryOp::multiply, grad_out.data(), spread_, grad_in->data(), n);
    ops.binary(mgt::BinaryOp::subtract, grad_in->data(), wide_, grad_in->data(), n);
  }
  mgt::LayerDescription describe() const override {
    char eps[32];
    std::snprintf(eps, sizeof eps, "scalar:%.9g", static_cast<double>(eps_));
    mgt::LayerDescription d;
    d.kind = mgt::LayerKind::onnx_nodes;
    mgt::OnnxNode mean{"ReduceMean", {"square"}, "mean_square"};
    mean.int_lists = {{"axes", {-1}}};
    d.nodes = {{"Mul", {"x", "x"}, "square"}, mean};
    if (export_eps_) {
      d.nodes.push_back({"Add", {"mean_square", eps}, "mean_square_eps"});
      d.nodes.push_back({"Sqrt", {"mean_square_eps"}, "rms"});
    } else {
      d.nodes.push_back({"Sqrt", {"mean_square"}, "rms"});
    }
    d.nodes.push_back({"Div", {"x", "rms"}, "y"});
    return d;
  }

 private:
  // out[r] = mean of row r of x [rows, dim]: a GEMM by a column of ones.
  void row_mean(mgt::Ops& ops, const float* x, float* out) const {
    ops.gemm(false, false, rows_, 1, dim_, 1.0f / static_cast<float>(dim_), x, dim_, ones_, 1, 0.0f, out, 1);
  }
  // out [rows, dim] = v[r] in every column of row r: the outer product with a row of ones.
  void spread(mgt::Ops& ops, const float* v, float* out) const {
    ops.gemm(false, false, rows_, dim_, 1, 1.0f, v, 1, ones_, dim_, 0.0f, out, dim_);
  }

  float eps_;
  bool export_eps_;
  int64_t rows_ = 0, dim_ = 0;
  float *wide_ = nullptr, *spread_ = nullptr, *inverse_ = nullptr, *row_ = nullptr;
  const float* ones_ = nullptr;
};

class RmsMlp final : public mgt::SequentialModel {
 public:
  explicit RmsMlp(const mgt::ConfigSection& config) {
    add(mgt::make_flatten("flatten"));
    add(mgt::make_linear("fc1", config.get_int("inputs"), config.get_int("hidden")));
    add(std::make_unique<RmsNorm>("rms1", static_cast<float>(config.get_real("eps")), config.get_bool("export_eps")));
    add(mgt::make_relu("relu1"));
    add(mgt::make_linear("fc2", config.get_int("hidden"), config.get_int("classes"), mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("rms_mlp", "1.0.0", "flatten, Linear, an RMSNorm layer of its own, ReLU, Linear", kKeys, RmsMlp)
