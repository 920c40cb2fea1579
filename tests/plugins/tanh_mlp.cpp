// A model with a layer of a plugin's own that has an ONNX form: Tanh, written over mgt::Ops,
// describes itself as the ONNX operator Tanh, so `mgtrain export` writes the model
// (tests/e2e/onnx_export.sh); with model.export_nodes as a composition of four operators with
// scalar constants, 2 sigmoid(2x) - 1. With model.export_form = false the layer keeps the default
// description (none), as a layer with no ONNX form, which export must refuse by name.
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::positive_integer, "64", "width of the hidden layer"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
    {"model.export_form", mgt::KeyType::boolean, "true", "the Tanh layer describes itself for export"},
    {"model.export_nodes", mgt::KeyType::boolean, "false",
     "the Tanh layer describes itself as several operators, 2 sigmoid(2x) - 1, not as Tanh"},
};

// y = tanh(x); dx = dy (1 - y^2).
class TanhLayer final : public mgt::Layer {
 public:
  TanhLayer(const std::string& name, bool export_form, bool export_nodes)
      : Layer(name), export_form_(export_form), export_nodes_(export_nodes) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
  void plan(mgt::LayerPlanner& planner, const mgt::Shape& input) override {
    scratch_ = planner.allocate_array<float>(static_cast<size_t>(mgt::shape_numel(input)));
  }
  void forward(const mgt::LayerRun& run, const mgt::Tensor& in, mgt::Tensor& out) override {
    run.ops.unary(mgt::UnaryOp::tanh, in.data(), out.data(), in.numel());
  }
  void backward(const mgt::LayerRun& run, const mgt::Tensor&, const mgt::Tensor& out, const mgt::Tensor& grad_out,
                mgt::Tensor* grad_in) override {
    if (!grad_in) return;
    const int64_t n = out.numel();
    run.ops.unary(mgt::UnaryOp::square, out.data(), scratch_, n);
    run.ops.affine(scratch_, scratch_, n, -1.0f, 1.0f);
    run.ops.binary(mgt::BinaryOp::multiply, grad_out.data(), scratch_, grad_in->data(), n);
  }
  mgt::LayerDescription describe() const override {
    mgt::LayerDescription d;
    if (!export_form_) return d;
    if (export_nodes_) {
      d.kind = mgt::LayerKind::onnx_nodes;
      d.nodes = {{"Mul", {"x", "scalar:2"}, "two_x"},
                 {"Sigmoid", {"two_x"}, "gate"},
                 {"Mul", {"gate", "scalar:2"}, "two_gate"},
                 {"Sub", {"two_gate", "scalar:1"}, "y"}};
      return d;
    }
    d.kind = mgt::LayerKind::onnx_operator;
    d.op_type = "Tanh";
    return d;
  }

 private:
  bool export_form_, export_nodes_;
  float* scratch_ = nullptr;
};

class TanhMlp final : public mgt::SequentialModel {
 public:
  explicit TanhMlp(const mgt::ConfigSection& config) {
    add(mgt::make_flatten("flatten"));
    add(mgt::make_linear("fc1", config.get_int("inputs"), config.get_int("hidden")));
    add(std::make_unique<TanhLayer>("tanh1", config.get_bool("export_form"), config.get_bool("export_nodes")));
    add(mgt::make_linear("fc2", config.get_int("hidden"), config.get_int("classes"), mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("tanh_mlp", "1.0.0", "flatten, Linear, a Tanh layer of its own, Linear", kKeys, TanhMlp)
