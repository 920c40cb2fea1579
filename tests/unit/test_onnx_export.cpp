// The ONNX export's graph, read back with ONNX's own protobuf messages: the nodes each SDK layer
// becomes (attributes, initializers under the canonical names holding the store's values), the
// input's normalisation, the free batch dimension, a language model's token input and shared
// table, and the refusals of a layer and a model with no ONNX form; the check of the graph against
// the model's forward (onnx_check.hpp) and its evaluator. ONNX Runtime runs the exported models in
// tests/e2e/onnx_export.sh.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "datasets/hdf5_format.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/model.hpp"
#include "tools/onnx_check.hpp"
#include "tools/onnx_evaluate.hpp"
#include "tools/onnx_export.hpp"

namespace {

using mgt::Shape;

class TestModel final : public mgt::SequentialModel {
 public:
  TestModel() {
    add(mgt::make_conv2d("conv1", 1, 4, 3, 2, 1));
    add(mgt::make_batch_norm2d("bn1", 4, 1e-3f));
    add(mgt::make_relu("relu1"));
    std::vector<std::unique_ptr<mgt::Layer>> branch, shortcut, branch2;
    branch.push_back(mgt::make_conv2d("res1.conv1", 4, 8, 3, 2, 1));
    shortcut.push_back(mgt::make_conv2d("res1.shortcut.conv1", 4, 8, 1, 2, 0));
    add(mgt::make_residual("res1", std::move(branch), std::move(shortcut)));
    branch2.push_back(mgt::make_relu("res2.relu1"));
    add(mgt::make_residual("res2", std::move(branch2)));
    add(mgt::make_max_pool2d("pool1", 2, 1));
    add(mgt::make_avg_pool2d("avgpool1", 2, 1));
    add(mgt::make_dropout("dropout1", 0.5f));
    add(mgt::make_linear("fc1", 8 * 2 * 2, 6));
    add(mgt::make_flatten("flatten1"));
    add(mgt::make_linear("fc2", 6, 3));
  }
};

// Values that say where they came from: element i of the k-th parameter or buffer is k + i / 1000.
void fill_store(mgt::ParameterStore& store) {
  float k = 0;
  for (size_t h = 0; h < store.params().size(); ++h, ++k)
    for (size_t i = 0; i < store.params()[h].numel; ++i) store.param(h)[i] = k + static_cast<float>(i) / 1000;
  for (size_t h = 0; h < store.buffers().size(); ++h, ++k)
    for (size_t i = 0; i < store.buffers()[h].numel; ++i) store.buffer(h)[i] = k + static_cast<float>(i) / 1000;
}

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromString(bytes));
  return proto;
}

std::vector<std::string> op_types(const onnx::GraphProto& graph) {
  std::vector<std::string> ops;
  for (const auto& node : graph.node()) ops.push_back(node.op_type());
  return ops;
}

const onnx::NodeProto& node_named(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& node : graph.node())
    if (node.name() == name) return node;
  throw std::runtime_error("no node " + name);
}

const onnx::AttributeProto& attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return a;
  throw std::runtime_error("node " + node.name() + " has no attribute " + name);
}

std::vector<int64_t> ints(const onnx::AttributeProto& a) { return {a.ints().begin(), a.ints().end()}; }

std::vector<float> initializer(const onnx::GraphProto& graph, const std::string& name, Shape* dims = nullptr) {
  for (const auto& t : graph.initializer())
    if (t.name() == name) {
      EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT);
      if (dims) *dims = Shape(t.dims().begin(), t.dims().end());
      std::vector<float> v(t.raw_data().size() / sizeof(float));
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
      return v;
    }
  throw std::runtime_error("no initializer " + name);
}

mgt::InputNormalisation uint8_normalisation() {
  mgt::data::DatasetInfo info;
  info.x_type = "uint8";
  info.normalized_attrs = true;
  info.mean = 0.25f;
  info.stddev = 0.5f;
  return mgt::input_normalisation(info);
}

TEST(OnnxExport, EachLayerBecomesItsNodes) {
  TestModel model;
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  fill_store(store);
  const auto exported = mgt::onnx_model(model, store, "test", {1, 16, 16}, uint8_normalisation());
  const onnx::ModelProto proto = parse(exported.bytes);
  const onnx::GraphProto& g = proto.graph();
  EXPECT_EQ(proto.opset_import(0).version(), 17);
  EXPECT_EQ(proto.producer_name(), "mgtrain");
  const std::vector<std::string> expected{
      "Div",  "Sub", "Div",     "Conv",        "BatchNormalization", "Relu",    "Conv", "Conv",    "Add",
      "Relu", "Add", "MaxPool", "AveragePool", "Identity",           "Flatten", "Gemm", "Flatten", "Gemm"};
  EXPECT_EQ(op_types(g), expected);
  EXPECT_EQ(exported.nodes, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(exported.classes, 3);

  const auto& conv = node_named(g, "conv1");
  EXPECT_EQ(ints(attribute(conv, "kernel_shape")), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(ints(attribute(conv, "strides")), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ints(attribute(conv, "pads")), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(conv.input(1), "conv1.weight");
  EXPECT_EQ(conv.input(2), "conv1.bias");
  const auto& bn = node_named(g, "bn1");
  EXPECT_FLOAT_EQ(attribute(bn, "epsilon").f(), 1e-3f);
  EXPECT_EQ(std::vector<std::string>(bn.input().begin() + 1, bn.input().end()),
            (std::vector<std::string>{"bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}));
  // The residual blocks add the branch to the projection, and to the block's input itself.
  EXPECT_EQ(node_named(g, "res1").input(0), "res1.conv1");
  EXPECT_EQ(node_named(g, "res1").input(1), "res1.shortcut.conv1");
  EXPECT_EQ(node_named(g, "res2").input(1), "res1");
  EXPECT_EQ(ints(attribute(node_named(g, "pool1"), "strides")), (std::vector<int64_t>{1, 1}));
  // fc1 takes [N, 8, 2, 2]: flattened for Gemm, whose weight is [out, in] (transB).
  EXPECT_EQ(node_named(g, "fc1.flatten").input(0), "dropout1");
  EXPECT_EQ(attribute(node_named(g, "fc1"), "transB").i(), 1);
  EXPECT_EQ(g.node(g.node_size() - 1).output(0), "logits");

  // Every parameter and buffer, by its canonical name, with the store's values and shape.
  for (size_t h = 0; h < store.params().size(); ++h) {
    Shape dims;
    const auto values = initializer(g, store.params()[h].name, &dims);
    EXPECT_EQ(dims, store.params()[h].shape) << store.params()[h].name;
    EXPECT_EQ(values, std::vector<float>(store.param(h), store.param(h) + store.params()[h].numel));
  }
  EXPECT_EQ(initializer(g, "bn1.running_var"),
            std::vector<float>(store.buffer(1), store.buffer(1) + store.buffers()[1].numel));

  // input float32 [N, 1, 16, 16] with N free; logits [N, 3].
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "input");
  const auto& in = g.input(0).type().tensor_type();
  EXPECT_EQ(in.elem_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(in.shape().dim_size(), 4);
  EXPECT_EQ(in.shape().dim(0).dim_param(), "N");
  EXPECT_EQ(in.shape().dim(3).dim_value(), 16);
  ASSERT_EQ(g.output_size(), 1);
  EXPECT_EQ(g.output(0).name(), "logits");
  EXPECT_EQ(g.output(0).type().tensor_type().shape().dim(0).dim_param(), "N");
  EXPECT_EQ(g.output(0).type().tensor_type().shape().dim(1).dim_value(), 3);
}

TEST(OnnxExport, NormalisesTheInputAsTheReader) {
  // uint8: x / 255, then (x - mean) / std.
  const auto u8 = uint8_normalisation();
  EXPECT_EQ(u8.text(), "x / 255, then (x - 0.25) / 0.5");
  mgt::SequentialModel model;
  model.add(mgt::make_flatten("flatten"));
  model.add(mgt::make_linear("fc", 12, 2));
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  {
    const auto g = parse(mgt::onnx_model(model, store, "m", {3, 2, 2}, u8).bytes).graph();
    EXPECT_EQ(initializer(g, "input_scale"), std::vector<float>{255.0f});
    EXPECT_EQ(initializer(g, "input_mean"), std::vector<float>{0.25f});
    EXPECT_EQ(initializer(g, "input_std"), std::vector<float>{0.5f});
  }
  // float32 with a mean and std per channel: (x - mean) * (1 / std), each [C, 1, 1].
  mgt::data::DatasetInfo info;
  info.x_type = "float32";
  info.channel_mean = {0.1f, 0.2f, 0.3f};
  info.channel_std = {2.0f, 4.0f, 8.0f};
  const auto g = parse(mgt::onnx_model(model, store, "m", {3, 2, 2}, mgt::input_normalisation(info)).bytes).graph();
  EXPECT_EQ(op_types(g), (std::vector<std::string>{"Sub", "Mul", "Flatten", "Gemm"}));
  Shape dims;
  EXPECT_EQ(initializer(g, "input_inv_std", &dims), (std::vector<float>{0.5f, 0.25f, 0.125f}));
  EXPECT_EQ(dims, (Shape{3, 1, 1}));
  // A float32 file without statistics is taken as it is.
  mgt::data::DatasetInfo plain;
  plain.x_type = "float32";
  EXPECT_EQ(mgt::input_normalisation(plain).text(), "none");
  const auto raw = parse(mgt::onnx_model(model, store, "m", {12}, mgt::input_normalisation(plain)).bytes).graph();
  EXPECT_EQ(op_types(raw), (std::vector<std::string>{"Flatten", "Gemm"}));
  EXPECT_EQ(raw.node(0).input(0), "input");
}

// A layer of a plugin's own that does not describe itself, and one that is one ONNX operator.
class Scale final : public mgt::Layer {
 public:
  Scale(const std::string& name, bool described) : Layer(name), described_(described) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
  void declare(mgt::ParameterStore& store) override {
    weight_ = store.declare(name() + ".weight", {4}, mgt::Init::ones, 1);
  }
  void forward(const mgt::LayerRun&, const mgt::Tensor&, mgt::Tensor&) override {}
  void backward(const mgt::LayerRun&, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor&,
                mgt::Tensor*) override {}
  std::vector<mgt::ParamHandle> param_handles() const override { return {weight_}; }
  mgt::LayerDescription describe() const override {
    mgt::LayerDescription d;
    if (!described_) return d;
    d.kind = mgt::LayerKind::onnx_operator;
    d.op_type = "Mul";
    d.params = {weight_};
    return d;
  }

 private:
  bool described_;
  mgt::ParamHandle weight_ = 0;
};

TEST(OnnxExport, APluginLayerDescribedAsAnOperator) {
  mgt::SequentialModel model;
  model.add(std::make_unique<Scale>("scale1", true));
  model.add(mgt::make_linear("fc", 4, 2));
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  store.initialize(1);
  const auto g = parse(mgt::onnx_model(model, store, "m", {4}, {}).bytes).graph();
  EXPECT_EQ(op_types(g), (std::vector<std::string>{"Mul", "Gemm"}));
  EXPECT_EQ(g.node(0).input(0), "input");
  EXPECT_EQ(g.node(0).input(1), "scale1.weight");
  EXPECT_EQ(initializer(g, "scale1.weight"), std::vector<float>(4, 1.0f));
}

// A composition with what real layers need: constants of its own (float and int64), list and
// string attributes, and a node of two outputs. [N, 4] -> split into halves, each scaled by a
// constant row, concatenated, transposed twice (the identity) and reshaped by a constant shape.
class Halves final : public mgt::Layer {
 public:
  explicit Halves(bool bad_constant = false) : Layer("halves1"), bad_constant_(bad_constant) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
  void forward(const mgt::LayerRun&, const mgt::Tensor&, mgt::Tensor&) override {}
  void backward(const mgt::LayerRun&, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor&,
                mgt::Tensor*) override {}
  mgt::LayerDescription describe() const override {
    mgt::LayerDescription d;
    d.kind = mgt::LayerKind::onnx_nodes;
    d.constants = {{"scale", {1, 2}, {0.5f, 2.0f}, {}}, {"sizes", {2}, {}, {2, 2}}, {"shape", {2}, {}, {0, 4}}};
    if (bad_constant_) d.constants[0].shape = {3};
    mgt::OnnxNode split{"Split", {"x", "constant:1"}, "", {{"axis", 1}}};
    split.outputs = {"left", "right"};
    mgt::OnnxNode transpose{"Transpose", {"joined"}, "turned"};
    transpose.int_lists = {{"perm", {1, 0}}};
    mgt::OnnxNode back{"Transpose", {"turned"}, "back"};
    back.int_lists = {{"perm", {1, 0}}};
    back.strings = {{"note", "identity"}};
    back.float_lists = {{"weights", {0.25f, 4.0f}}};
    d.nodes = {split,
               {"Mul", {"left", "constant:0"}, "left_scaled"},
               {"Mul", {"right", "constant:0"}, "right_scaled"},
               {"Concat", {"left_scaled", "right_scaled"}, "joined", {{"axis", 1}}},
               transpose,
               back,
               {"Reshape", {"back", "constant:2"}, "y"}};
    return d;
  }

 private:
  bool bad_constant_;
};

TEST(OnnxExport, ACompositionWithConstantsListsAndTwoOutputs) {
  mgt::SequentialModel model;
  model.add(std::make_unique<Halves>());
  model.add(mgt::make_linear("fc", 4, 2));
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  store.initialize(1);
  const auto g = parse(mgt::onnx_model(model, store, "m", {4}, {}).bytes).graph();
  EXPECT_EQ(op_types(g),
            (std::vector<std::string>{"Split", "Mul", "Mul", "Concat", "Transpose", "Transpose", "Reshape", "Gemm"}));
  const onnx::NodeProto& split = g.node(0);
  ASSERT_EQ(split.output_size(), 2);
  EXPECT_EQ(split.output(0), "halves1.left");
  EXPECT_EQ(split.output(1), "halves1.right");
  EXPECT_EQ(split.input(1), "halves1.sizes");
  EXPECT_EQ(g.node(1).input(0), "halves1.left");
  EXPECT_EQ(g.node(2).input(0), "halves1.right");
  // One initializer per constant, however many nodes read it.
  EXPECT_EQ(g.node(1).input(1), "halves1.scale");
  EXPECT_EQ(g.node(2).input(1), "halves1.scale");
  Shape dims;
  EXPECT_EQ(initializer(g, "halves1.scale", &dims), (std::vector<float>{0.5f, 2.0f}));
  EXPECT_EQ(dims, (Shape{1, 2}));
  bool found_shape = false;
  for (const auto& t : g.initializer())
    if (t.name() == "halves1.shape") {
      found_shape = true;
      EXPECT_EQ(t.data_type(), onnx::TensorProto::INT64);
      EXPECT_EQ(std::vector<int64_t>(t.int64_data().begin(), t.int64_data().end()), (std::vector<int64_t>{0, 4}));
    }
  EXPECT_TRUE(found_shape);
  const auto& perm = attribute(node_named(g, "halves1.turned"), "perm");
  EXPECT_EQ(perm.type(), onnx::AttributeProto::INTS);
  EXPECT_EQ(ints(perm), (std::vector<int64_t>{1, 0}));
  const auto& back = node_named(g, "halves1.back");
  EXPECT_EQ(attribute(back, "note").type(), onnx::AttributeProto::STRING);
  EXPECT_EQ(attribute(back, "note").s(), "identity");
  const auto& weights = attribute(back, "weights");
  EXPECT_EQ(weights.type(), onnx::AttributeProto::FLOATS);
  EXPECT_EQ(std::vector<float>(weights.floats().begin(), weights.floats().end()), (std::vector<float>{0.25f, 4.0f}));
  EXPECT_EQ(g.node(6).output(0), "halves1");  // the last node's output is the layer's
  EXPECT_EQ(g.node(7).input(0), "halves1");
}

TEST(OnnxExport, RefusesAConstantWhoseValuesDoNotFillItsShape) {
  mgt::SequentialModel model;
  model.add(std::make_unique<Halves>(/*bad_constant=*/true));
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  try {
    mgt::onnx_model(model, store, "m", {4}, {});
    FAIL() << "exported a constant of 2 values as shape [3]";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'm': layer 'halves1' describes constant 0 ('scale') of shape [3] "
                                         "with 2 values: expected a name and as many values as the shape holds"),
              std::string::npos)
        << e.what();
  }
}

TEST(OnnxExport, RefusesALayerWithNoForm) {
  mgt::SequentialModel model;
  model.add(mgt::make_linear("fc1", 4, 4));
  std::vector<std::unique_ptr<mgt::Layer>> branch;
  branch.push_back(std::make_unique<Scale>("scale1", false));
  model.add(mgt::make_residual("res1", std::move(branch)));
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  try {
    mgt::onnx_model(model, store, "scaled", {4}, {});
    FAIL() << "exported a layer with no ONNX form";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'scaled': layer 'scale1' has no ONNX form"), std::string::npos)
        << e.what();
  }
}

// A two-block language model of the SDK's sequence layers, as the gpt plugin builds it: vocabulary
// 11, context 8, width 8, 2 heads.
class TinyGpt final : public mgt::SequentialModel {
 public:
  TinyGpt(bool tied, bool causal, bool positions = true) {
    add(mgt::make_token_embedding("wte", 11, positions ? 8 : mgt::kNoPositions, 8, tied));
    std::vector<std::unique_ptr<mgt::Layer>> attention, mlp;
    attention.push_back(mgt::make_layer_norm("h0.ln1", 8, 1e-4f));
    attention.push_back(mgt::make_token_linear("h0.attn.qkv", 8, 24));
    attention.push_back(mgt::make_attention("h0.attn", 8, 2, causal));
    attention.push_back(mgt::make_token_linear("h0.attn.proj", 8, 8));
    attention.push_back(mgt::make_dropout("h0.attn_drop", 0.1f));
    add(mgt::make_residual("h0.attn_block", std::move(attention)));
    mlp.push_back(mgt::make_layer_norm("h0.ln2", 8));
    mlp.push_back(mgt::make_token_linear("h0.mlp.fc", 8, 32));
    mlp.push_back(mgt::make_gelu("h0.mlp.gelu"));
    mlp.push_back(mgt::make_token_linear("h0.mlp.proj", 32, 8));
    add(mgt::make_residual("h0.mlp_block", std::move(mlp)));
    add(mgt::make_layer_norm("ln_f", 8));
    if (tied)
      add(mgt::make_tied_head("head", "wte", 11, 8));
    else
      add(mgt::make_token_linear("head", 8, 11));
  }
  int64_t sequence_length() const override { return 8; }
};

onnx::GraphProto tiny_gpt_graph(bool tied, bool causal, mgt::OnnxModel* exported = nullptr, bool positions = true) {
  TinyGpt model(tied, causal, positions);
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  fill_store(store);
  const auto written = mgt::onnx_model(model, store, "gpt", {8}, {});
  if (exported) *exported = written;
  return parse(written.bytes).graph();
}

int uses_of(const onnx::GraphProto& graph, const std::string& tensor) {
  int n = 0;
  for (const auto& node : graph.node())
    for (const auto& input : node.input()) n += input == tensor;
  return n;
}

TEST(OnnxExport, ALanguageModelTakesTokenIds) {
  mgt::OnnxModel exported;
  const onnx::GraphProto g = tiny_gpt_graph(true, true, &exported);
  EXPECT_EQ(exported.classes, 11);
  EXPECT_EQ(exported.context, 8);
  const std::vector<std::string> expected{
      // the embedding: the ids' rows, plus the first T position rows
      "Gather", "Shape", "Slice", "Add",
      // x + proj(attention(qkv(ln1(x))))
      "LayerNormalization", "Transpose", "MatMul", "Add", "Split", "Reshape", "Transpose", "Reshape", "Transpose",
      "Reshape", "Transpose", "MatMul", "Mul", "Concat", "Slice", "Add", "Softmax", "MatMul", "Transpose", "Reshape",
      "Transpose", "MatMul", "Add", "Identity", "Add",
      // x + proj(gelu(fc(ln2(x))))
      "LayerNormalization", "Transpose", "MatMul", "Add", "Mul", "Mul", "Mul", "Add", "Mul", "Tanh", "Add", "Mul",
      "Mul", "Transpose", "MatMul", "Add", "Add",
      // ln_f, the head on the embedding's table
      "LayerNormalization", "Transpose", "MatMul"};
  EXPECT_EQ(op_types(g), expected);

  // int64 ids [N, T] in, logits [N, T, vocab] out, N and T free; no normalisation.
  const auto& in = g.input(0).type().tensor_type();
  EXPECT_EQ(g.input(0).name(), "input");
  EXPECT_EQ(in.elem_type(), onnx::TensorProto::INT64);
  ASSERT_EQ(in.shape().dim_size(), 2);
  EXPECT_EQ(in.shape().dim(0).dim_param(), "N");
  EXPECT_EQ(in.shape().dim(1).dim_param(), "T");
  const auto& out = g.output(0).type().tensor_type();
  ASSERT_EQ(out.shape().dim_size(), 3);
  EXPECT_EQ(out.shape().dim(0).dim_param(), "N");
  EXPECT_EQ(out.shape().dim(1).dim_param(), "T");
  EXPECT_EQ(out.shape().dim(2).dim_value(), 11);
  EXPECT_EQ(g.node(0).input(1), "input");

  // The table is written once: the Gather and the head's transpose read the same initializer.
  int tables = 0;
  for (const auto& t : g.initializer()) tables += t.name() == "wte.weight";
  EXPECT_EQ(tables, 1);
  EXPECT_EQ(uses_of(g, "wte.weight"), 2);
  EXPECT_EQ(node_named(g, "wte.weight.transposed").input(0), "wte.weight");
  EXPECT_EQ(g.node(g.node_size() - 1).input(1), "wte.weight.transposed");
  EXPECT_EQ(g.node(g.node_size() - 1).output(0), "logits");
  // Positions: rows [0, T) of the table, T the input's dimension 1.
  const auto& shape = node_named(g, "sequence_length");
  EXPECT_EQ(shape.input(0), "input");
  EXPECT_EQ(attribute(shape, "start").i(), 1);
  EXPECT_EQ(attribute(shape, "end").i(), 2);
  EXPECT_EQ(node_named(g, "wte.positions").input(0), "wte.position");
  EXPECT_EQ(node_named(g, "wte.positions").input(2), "sequence_length");

  EXPECT_FLOAT_EQ(attribute(node_named(g, "h0.ln1"), "epsilon").f(), 1e-4f);
  EXPECT_EQ(attribute(node_named(g, "h0.ln1"), "axis").i(), -1);
  // A token linear layer: x W^T + b, W^T a Transpose of the [out, in] initializer.
  EXPECT_EQ(node_named(g, "h0.attn.qkv.matmul").input(1), "h0.attn.qkv.weight.transposed");
  EXPECT_EQ(node_named(g, "h0.attn.qkv").input(1), "h0.attn.qkv.bias");

  // Attention: [B, T, 24] split into Q, K, V, each [B, T, 2 heads, 4] by head, scaled by 1/sqrt(4),
  // the causal mask added, softmax over the keys, the heads put back side by side.
  const auto& split = node_named(g, "h0.attn.q");
  EXPECT_EQ(split.op_type(), "Split");
  EXPECT_EQ(split.output_size(), 3);
  EXPECT_EQ(attribute(split, "axis").i(), -1);
  EXPECT_EQ(node_named(g, "h0.attn.q.heads").input(1), "i64_0_0_2_4");
  EXPECT_EQ(ints(attribute(node_named(g, "h0.attn.q.by_head"), "perm")), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(ints(attribute(node_named(g, "h0.attn.k.by_head"), "perm")), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(initializer(g, node_named(g, "h0.attn.scaled").input(1)), std::vector<float>{0.5f});
  Shape mask_dims;
  const std::vector<float> mask = initializer(g, "causal_mask", &mask_dims);
  EXPECT_EQ(mask_dims, (Shape{8, 8}));
  for (int query = 0; query < 8; ++query)
    for (int key = 0; key < 8; ++key) {
      const bool masked = mask[query * 8 + key] < -1e8f;
      EXPECT_EQ(masked, key > query) << "query " << query << " key " << key;
    }
  EXPECT_EQ(node_named(g, "h0.attn.masked").input(1), "causal_mask.sequence");
  EXPECT_EQ(attribute(node_named(g, "h0.attn.probs"), "axis").i(), -1);
  EXPECT_EQ(node_named(g, "h0.attn").op_type(), "Reshape");
  EXPECT_EQ(node_named(g, "h0.attn").input(1), "i64_0_0_8");

  // GELU's constants, the backend's.
  EXPECT_EQ(initializer(g, "gelu_cubic"), std::vector<float>{0.044715f});
  EXPECT_EQ(initializer(g, "gelu_sqrt_2_over_pi"), std::vector<float>{0.7978845608028654f});
  EXPECT_EQ(node_named(g, "h0.mlp.gelu.tanh").op_type(), "Tanh");
}

TEST(OnnxExport, AnUntiedHeadAndBidirectionalAttention) {
  const onnx::GraphProto g = tiny_gpt_graph(false, false);
  // The head is a token linear layer of its own; the table serves the Gather only.
  EXPECT_EQ(uses_of(g, "wte.weight"), 1);
  EXPECT_EQ(node_named(g, "head.matmul").input(1), "head.weight.transposed");
  EXPECT_EQ(node_named(g, "head").input(1), "head.bias");
  EXPECT_EQ(g.node(g.node_size() - 1).output(0), "logits");
  // No mask: the scaled scores go straight to the softmax.
  for (const auto& t : g.initializer()) EXPECT_NE(t.name(), "causal_mask");
  EXPECT_EQ(node_named(g, "h0.attn.probs").input(0), "h0.attn.scaled");
}

TEST(OnnxExport, AnEmbeddingWithoutPositionsIsAGatherAlone) {
  mgt::OnnxModel exported;
  const onnx::GraphProto g = tiny_gpt_graph(true, true, &exported, /*positions=*/false);
  EXPECT_EQ(exported.context, 8);  // still the model's window: the causal mask is cut from it
  const auto& gather = g.node(0);
  EXPECT_EQ(gather.op_type(), "Gather");
  EXPECT_EQ(gather.name(), "wte");
  EXPECT_EQ(gather.input(0), "wte.weight");
  EXPECT_EQ(gather.input(1), "input");
  EXPECT_EQ(attribute(gather, "axis").i(), 0);
  // The first block reads the Gather's rows as they are: no position table, no Add after it.
  EXPECT_EQ(g.node(1).op_type(), "LayerNormalization");
  EXPECT_EQ(g.node(1).input(0), gather.output(0));
  for (const auto& t : g.initializer()) EXPECT_EQ(t.name().find("position"), std::string::npos) << t.name();
  // The tied head still reads the one table.
  EXPECT_EQ(uses_of(g, "wte.weight"), 2);
}

class HandWritten final : public mgt::Model {
 public:
  void declare(mgt::ParameterStore&) override {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return {input[0], 2}; }
  const mgt::Tensor& forward(const mgt::Tensor&, const mgt::StepContext&) override { return out_; }
  void backward(const mgt::Tensor&, const mgt::StepContext&, const mgt::GradientsReady&) override {}

 private:
  mgt::Tensor out_;
};

TEST(OnnxExport, RefusesAModelThatIsNoStack) {
  HandWritten model;
  mgt::ParameterStore store;
  store.finalize();
  try {
    mgt::onnx_model(model, store, "hand", {4}, {});
    FAIL() << "exported a model with no layers";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'hand' has no ONNX form: it is not a stack of layers"),
              std::string::npos)
        << e.what();
  }
}

// The check of `mgtrain export` (onnx_check.hpp): the graph run by the project's evaluator against
// the model's own forward on a batch, at every layer's output.

// A batch of `shape` in [-1, 1) for a graph without normalisation (the model sees the same values).
mgt::OnnxSample uniform_sample(const Shape& shape) {
  mgt::OnnxSample sample;
  sample.shape = shape;
  sample.description = "a test batch";
  uint32_t state = 12345;
  for (int64_t k = 0; k < mgt::shape_numel(shape); ++k) {
    state = state * 1664525u + 1013904223u;
    sample.graph_input.push_back(static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f);
  }
  sample.model_input = sample.graph_input;
  return sample;
}

// Parameters as a run initialises them; running statistics away from 0 and 1, so that the graph's
// batch norm is seen to read them.
void initialise(mgt::ParameterStore& store) {
  store.initialize(7);
  for (size_t h = 0; h < store.buffers().size(); ++h)
    for (size_t i = 0; i < store.buffers()[h].numel; ++i)
      store.buffer(h)[i] = 0.5f + 0.01f * static_cast<float>(i % 17);
}

// Convolutions of 16 channels, which the CPU executor may keep in channel blocks between layers.
class WideConvModel final : public mgt::SequentialModel {
 public:
  WideConvModel() {
    add(mgt::make_conv2d("conv1", 3, 16, 3, 1, 1));
    add(mgt::make_batch_norm2d("bn1", 16, 1e-5f));
    add(mgt::make_relu("relu1"));
    std::vector<std::unique_ptr<mgt::Layer>> branch;
    branch.push_back(mgt::make_conv2d("res1.conv1", 16, 16, 3, 1, 1));
    branch.push_back(mgt::make_batch_norm2d("res1.bn1", 16, 1e-5f));
    branch.push_back(mgt::make_relu("res1.relu1"));
    branch.push_back(mgt::make_conv2d("res1.conv2", 16, 16, 3, 1, 1));
    add(mgt::make_residual("res1", std::move(branch)));
    add(mgt::make_relu("relu2"));
    add(mgt::make_max_pool2d("pool1", 2, 2));
    add(mgt::make_global_avg_pool2d("gap"));
    add(mgt::make_linear("fc", 16, 5));
  }
};

template <typename M>
mgt::OnnxCheck check_model(M& model, const Shape& sample_shape, const mgt::OnnxSample& sample) {
  mgt::ParameterStore store;
  model.declare(store);
  store.finalize();
  initialise(store);
  const mgt::OnnxModel exported = mgt::onnx_model(model, store, "m", sample_shape, {});
  return mgt::check_onnx_model(model, exported, "m", sample);
}

TEST(OnnxCheck, EverySdkLayerComputesWhatItsForwardDoes) {
  TestModel image;
  const mgt::OnnxCheck a = check_model(image, {1, 16, 16}, uniform_sample({3, 1, 16, 16}));
  EXPECT_TRUE(a.checked) << a.not_checked;
  EXPECT_GE(a.outputs, 9);
  EXPECT_LE(a.largest, mgt::kOnnxCheckTolerance);
  WideConvModel wide;
  const mgt::OnnxCheck b = check_model(wide, {3, 8, 8}, uniform_sample({2, 3, 8, 8}));
  EXPECT_TRUE(b.checked) << b.not_checked;
  EXPECT_GE(b.outputs, 10);
  for (const bool tied : {true, false})
    for (const bool causal : {true, false}) {
      TinyGpt gpt(tied, causal);
      // Fewer tokens than the context, as export checks a long one.
      for (const int64_t length : {8, 5}) {
        const mgt::OnnxCheck c = check_model(gpt, {8}, mgt::token_sample(11, 2, length));
        EXPECT_TRUE(c.checked) << c.not_checked;
        EXPECT_GE(c.outputs, 12);
        EXPECT_LE(c.largest, mgt::kOnnxCheckTolerance) << "tied " << tied << " causal " << causal;
        EXPECT_EQ(c.sample, "2 windows of " + std::to_string(length) + " random token ids");
      }
    }
}

// y = 2x, described as x times `factor`: right at 2, wrong by 0.05% at 2.001.
class Twice final : public mgt::Layer {
 public:
  Twice(const std::string& name, std::string factor, std::string op = "Mul")
      : Layer(name), factor_(std::move(factor)), op_(std::move(op)) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
  void forward(const mgt::LayerRun& run, const mgt::Tensor& in, mgt::Tensor& out) override {
    run.ops.affine(in.data(), out.data(), in.numel(), 2.0f, 0.0f);
  }
  void backward(const mgt::LayerRun&, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor&,
                mgt::Tensor*) override {}
  mgt::LayerDescription describe() const override {
    mgt::LayerDescription d;
    d.kind = mgt::LayerKind::onnx_nodes;
    d.nodes = {{op_, {"x", "scalar:" + factor_}, "y"}};
    return d;
  }

 private:
  std::string factor_, op_;
};

class TwiceMlp final : public mgt::SequentialModel {
 public:
  TwiceMlp(const std::string& factor, const std::string& op = "Mul") {
    add(mgt::make_linear("fc1", 6, 5));
    add(std::make_unique<Twice>("twice1", factor, op));
    add(mgt::make_relu("relu1"));
    add(mgt::make_linear("fc2", 5, 3));
  }
};

TEST(OnnxCheck, ALayerDescribedWronglyIsRefusedByName) {
  TwiceMlp right("2");
  EXPECT_TRUE(check_model(right, {6}, uniform_sample({4, 6})).checked);
  TwiceMlp wrong("2.001");
  try {
    check_model(wrong, {6}, uniform_sample({4, 6}));
    FAIL() << "a layer described as 2.001 x, computing 2 x, passed";
  } catch (const mgt::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model 'm': layer 'twice1' computes another output in the exported graph than in its "
                        "forward, on a test batch: largest difference "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("expected at most 0.0001"), std::string::npos) << what;
    // Measured against the layer's largest |value|: 0.0005 of it.
    EXPECT_NE(what.find(", 0.0005 of the largest |value| "), std::string::npos) << what;
  }
}

TEST(OnnxCheck, AnOperatorTheEvaluatorLacksLeavesTheGraphUnchecked) {
  TwiceMlp model("2", "BitShift");
  const mgt::OnnxCheck c = check_model(model, {6}, uniform_sample({4, 6}));
  EXPECT_FALSE(c.checked);
  EXPECT_EQ(c.not_checked, "layer 'twice1': node 'twice1' (BitShift): operator BitShift");
}

mgt::onnx_eval::Value floats(Shape dims, std::vector<float> values) {
  mgt::onnx_eval::Value v;
  v.dims = std::move(dims);
  v.f = std::move(values);
  return v;
}

// Operators the SDK's layers do not use but descriptions do, against values worked by hand.
TEST(OnnxEvaluate, ReductionsSlicesAndBroadcasts) {
  onnx::GraphProto g;
  g.add_input()->set_name("x");
  const auto add_node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    onnx::NodeProto* n = g.add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  const auto ints_initializer = [&](const std::string& name, std::vector<int64_t> values) {
    onnx::TensorProto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  };
  onnx::NodeProto* mean = add_node("ReduceMean", {"x"}, "mean");  // [2, 3] -> [2, 1]
  onnx::AttributeProto* axes = mean->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(-1);
  add_node("Sub", {"x", "mean"}, "centred");  // broadcast over the columns
  ints_initializer("starts", {-1});
  ints_initializer("ends", {-4});
  ints_initializer("axes", {1});
  ints_initializer("steps", {-2});
  add_node("Slice", {"x", "starts", "ends", "axes", "steps"}, "reversed");  // columns 2, 0
  ints_initializer("rows", {1, 0, 1});
  add_node("Gather", {"x", "rows"}, "gathered");
  const auto out =
      mgt::onnx_eval::run(g, {{"x", floats({2, 3}, {1, 2, 6, 4, 5, 9})}}, {"mean", "centred", "reversed", "gathered"});
  EXPECT_EQ(out.at("mean").dims, (Shape{2, 1}));
  EXPECT_EQ(out.at("mean").f, (std::vector<float>{3, 6}));
  EXPECT_EQ(out.at("centred").f, (std::vector<float>{-2, -1, 3, -2, -1, 3}));
  EXPECT_EQ(out.at("reversed").dims, (Shape{2, 2}));
  EXPECT_EQ(out.at("reversed").f, (std::vector<float>{6, 1, 9, 4}));
  EXPECT_EQ(out.at("gathered").dims, (Shape{3, 3}));
  EXPECT_EQ(out.at("gathered").f, (std::vector<float>{4, 5, 9, 1, 2, 6, 4, 5, 9}));
}

}  // namespace
