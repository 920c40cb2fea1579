#include "tools/onnx_export.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "base/atomic_file.hpp"
#include "checkpoint/checkpoint.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/token_reader.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/version.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/trainer.hpp"
#include "tools/onnx_check.hpp"

namespace mgt {

namespace {

// Opset 17 is the newest the ONNX release Debian 12 ships (1.12) knows; ONNX Runtime from 1.13 on
// runs it.
constexpr int64_t kOpset = 17;

// The GELU's tanh form as the backend computes it (kernels/cpu/sequence.cpp).
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// What the causal mask adds to a score of a later key: finite, so no infinity meets arithmetic,
// and so far below any score that its probability is exactly 0, as the layer's masked ones are.
constexpr float kMaskedScore = -1e9f;

std::string number(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", static_cast<double>(v));
  return text;
}

std::string values(const std::vector<float>& v) {
  if (v.size() == 1) return number(v[0]);
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + number(v[i]);
  return out + "]";
}

const char* kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::none:
      return "none";
    case LayerKind::linear:
      return "linear";
    case LayerKind::conv2d:
      return "conv2d";
    case LayerKind::max_pool2d:
      return "max_pool2d";
    case LayerKind::avg_pool2d:
      return "avg_pool2d";
    case LayerKind::global_avg_pool2d:
      return "global_avg_pool2d";
    case LayerKind::batch_norm2d:
      return "batch_norm2d";
    case LayerKind::relu:
      return "relu";
    case LayerKind::flatten:
      return "flatten";
    case LayerKind::dropout:
      return "dropout";
    case LayerKind::residual:
      return "residual";
    case LayerKind::onnx_operator:
      return "onnx_operator";
    case LayerKind::onnx_nodes:
      return "onnx_nodes";
    case LayerKind::token_embedding:
      return "token_embedding";
    case LayerKind::layer_norm:
      return "layer_norm";
    case LayerKind::gelu_tanh:
      return "gelu_tanh";
    case LayerKind::attention:
      return "attention";
    case LayerKind::tied_head:
      return "tied_head";
    case LayerKind::token_linear:
      return "token_linear";
  }
  return "?";
}

onnx::AttributeProto int_attr(const std::string& name, int64_t value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(value);
  return a;
}

onnx::AttributeProto ints_attr(const std::string& name, const std::vector<int64_t>& values) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a.add_ints(v);
  return a;
}

onnx::AttributeProto floats_attr(const std::string& name, const std::vector<float>& values) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOATS);
  for (float v : values) a.add_floats(v);
  return a;
}

onnx::AttributeProto string_attr(const std::string& name, const std::string& value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(value);
  return a;
}

onnx::AttributeProto float_attr(const std::string& name, float value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(value);
  return a;
}

// Walks the layers' descriptions and adds their nodes and initializers to one graph. Tensor names
// are the layers' (and the parameters' canonical) names, made unique where they meet.
class GraphBuilder {
 public:
  GraphBuilder(onnx::GraphProto& graph, ParameterStore& store, std::string model_name)
      : graph_(graph), store_(store), model_(std::move(model_name)) {}

  // Adds the nodes of `layers` applied to `x` of shape `shape` (batch 1); returns the output's name
  // and leaves its shape in `shape`.
  std::string layers(const std::vector<const Layer*>& list, std::string x, Shape& shape) {
    for (const Layer* layer : list) x = layer_nodes(*layer, x, shape);
    return x;
  }

  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& name,
                   const std::vector<onnx::AttributeProto>& attributes = {}) {
    return node_outputs(op, inputs, {name}, attributes)[0];
  }

  // A node with one output for each of `names`; the node is named after the first.
  std::vector<std::string> node_outputs(const std::string& op, const std::vector<std::string>& inputs,
                                        const std::vector<std::string>& names,
                                        const std::vector<onnx::AttributeProto>& attributes = {}) {
    onnx::NodeProto* n = graph_.add_node();
    n->set_op_type(op);
    std::vector<std::string> outputs;
    for (const auto& name : names) outputs.push_back(unique(name));
    n->set_name(outputs[0]);
    for (const auto& input : inputs) n->add_input(input);
    for (const auto& output : outputs) n->add_output(output);
    for (const auto& a : attributes) *n->add_attribute() = a;
    return outputs;
  }

  // A constant tensor of the graph: float32 `values` of shape `dims`.
  std::string constant(const std::string& name, const Shape& dims, const float* values, size_t count) {
    onnx::TensorProto* t = graph_.add_initializer();
    const std::string unique_name = unique(name);
    t->set_name(unique_name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    // raw_data is little-endian, as every host mgtrain builds for.
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values), count * sizeof(float)));
    return unique_name;
  }

  // An int64 constant tensor of shape `dims`, under a name of its own.
  std::string int64_tensor(const std::string& name, const Shape& dims, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = graph_.add_initializer();
    const std::string unique_name = unique(name);
    t->set_name(unique_name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
    return unique_name;
  }

  // A 1-D int64 constant (shapes, axes, slice bounds), one initializer for every node that uses
  // the same values.
  std::string int64_constant(const std::vector<int64_t>& values) {
    std::string name = "i64";
    for (int64_t v : values) name += "_" + std::to_string(v);
    auto [it, fresh] = shared_.try_emplace(name);
    if (!fresh) return it->second;
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(it->second = unique(name));
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return it->second;
  }

  // A float32 scalar under `name`, one initializer for every node that uses it.
  std::string scalar(const std::string& name, float value) {
    auto [it, fresh] = shared_.try_emplace(name);
    if (fresh) it->second = constant(name, {}, &value, 1);
    return it->second;
  }

  std::string unique(const std::string& name) {
    std::string candidate = name;
    for (int i = 2; !names_.insert(candidate).second; ++i) candidate = name + "_" + std::to_string(i);
    return candidate;
  }

  int64_t nodes() const { return graph_.node_size(); }

 private:
  [[noreturn]] void no_form(const Layer& layer, const std::string& why) const {
    throw Error("model '" + model_ + "': layer '" + layer.name() + "' " + why +
                " (docs/plugins.md, \"A layer's export form\")");
  }

  std::string param(const Layer& layer, const LayerDescription& d, size_t i) {
    if (i >= d.params.size())
      no_form(layer, std::string("describes itself as ") + kind_name(d.kind) + " with " +
                         std::to_string(d.params.size()) + " parameter(s), expected " + std::to_string(i + 1));
    const ParamHandle h = d.params[i];
    if (h >= store_.params().size()) no_form(layer, "names parameter handle " + std::to_string(h) + ", not declared");
    if (auto it = params_.find(h); it != params_.end()) return it->second;
    const ParamInfo& info = store_.info(h);
    return params_[h] = constant(info.name, info.shape, store_.param(h), info.numel);
  }

  std::string buffer(const Layer& layer, const LayerDescription& d, size_t i) {
    if (i >= d.buffers.size())
      no_form(layer, std::string("describes itself as ") + kind_name(d.kind) + " with " +
                         std::to_string(d.buffers.size()) + " buffer(s), expected " + std::to_string(i + 1));
    const BufferHandle h = d.buffers[i];
    if (h >= store_.buffers().size()) no_form(layer, "names buffer handle " + std::to_string(h) + ", not declared");
    if (auto it = buffers_.find(h); it != buffers_.end()) return it->second;
    const BufferInfo& info = store_.buffers()[h];
    return buffers_[h] = constant(info.name, info.shape, store_.buffer(h), info.numel);
  }

  // W^T of a [out, in] parameter for MatMul: a Transpose of its initializer, which ONNX Runtime
  // folds when it loads the model, so the file keeps each parameter once under its own name (the
  // token table too when the head is tied to it).
  std::string transposed(const std::string& weight) {
    auto [it, fresh] = transposed_.try_emplace(weight);
    if (fresh) it->second = node("Transpose", {weight}, weight + ".transposed", {ints_attr("perm", {1, 0})});
    return it->second;
  }

  // The sequence length T of the graph's input, int64 [1]: every tensor of a token model has the
  // same T at dimension 1, so the first one asked gives it for all.
  std::string sequence_length(const std::string& x) {
    if (sequence_length_.empty())
      sequence_length_ = node("Shape", {x}, "sequence_length", {int_attr("start", 1), int_attr("end", 2)});
    return sequence_length_;
  }

  // [T, T]: 0 where a query may see the key (itself and those before it), kMaskedScore above the
  // diagonal; cut from a [longest, longest] constant, so T may be any length up to the longest.
  std::string causal_mask(const std::string& x, int64_t longest) {
    if (!causal_mask_.empty()) return causal_mask_;
    std::vector<float> mask(static_cast<size_t>(longest * longest), 0.0f);
    for (int64_t query = 0; query < longest; ++query)
      for (int64_t key = query + 1; key < longest; ++key)
        mask[static_cast<size_t>(query * longest + key)] = kMaskedScore;
    const std::string full = constant("causal_mask", {longest, longest}, mask.data(), mask.size());
    const std::string t = sequence_length(x);
    const std::string ends = node("Concat", {t, t}, "causal_mask.ends", {int_attr("axis", 0)});
    causal_mask_ = node("Slice", {full, int64_constant({0, 0}), ends, int64_constant({0, 1})}, "causal_mask.sequence");
    return causal_mask_;
  }

  // Multi-head attention over Q|K|V [B, T, 3 dim] as the layer computes it: per head
  // softmax(Q K^T / sqrt(head_dim) + mask) V, the heads' outputs side by side [B, T, dim].
  std::string attention(const Layer& layer, const LayerDescription& d, const std::string& x, const Shape& shape) {
    const std::string& name = layer.name();
    const int64_t heads = int_attribute(layer, d, "heads"), causal = int_attribute(layer, d, "causal");
    const int64_t dim = shape.back() / 3;
    if (shape.size() != 3 || shape.back() % 3 != 0 || heads < 1 || dim % heads != 0)
      no_form(layer, "describes itself as attention with " + std::to_string(heads) + " heads over input " +
                         shape_string(shape) + ", expected [B, T, 3 dim] with heads dividing dim");
    const int64_t head_dim = dim / heads;
    const auto qkv = node_outputs("Split", {x}, {name + ".q", name + ".k", name + ".v"}, {int_attr("axis", -1)});
    // A head's columns become a dimension, [B, T, heads, head_dim], then heads go before T.
    const std::string split_heads = int64_constant({0, 0, heads, head_dim});
    const auto per_head = [&](const std::string& t, const std::vector<int64_t>& perm) {
      return node("Transpose", {node("Reshape", {t, split_heads}, t + ".heads")}, t + ".by_head",
                  {ints_attr("perm", perm)});
    };
    const std::string q = per_head(qkv[0], {0, 2, 1, 3});                // [B, heads, T, head_dim]
    const std::string k_t = per_head(qkv[1], {0, 2, 3, 1});              // [B, heads, head_dim, T]
    const std::string v = per_head(qkv[2], {0, 2, 1, 3});                // [B, heads, T, head_dim]
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));  // the layer's, in float
    std::string scores =
        node("Mul",
             {node("MatMul", {q, k_t}, name + ".scores"), scalar("attention_scale_" + std::to_string(head_dim), scale)},
             name + ".scaled");
    if (causal) scores = node("Add", {scores, causal_mask(x, shape[1])}, name + ".masked");
    const std::string probs = node("Softmax", {scores}, name + ".probs", {int_attr("axis", -1)});
    const std::string per_token = node("Transpose", {node("MatMul", {probs, v}, name + ".heads_out")},
                                       name + ".by_token", {ints_attr("perm", {0, 2, 1, 3})});
    return node("Reshape", {per_token, int64_constant({0, 0, dim})}, name);
  }

  // GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in the backend's order of
  // operations (opset 17 has no Gelu operator).
  std::string gelu_tanh(const std::string& x, const std::string& name) {
    const std::string cubic = node(
        "Mul", {node("Mul", {node("Mul", {x, scalar("gelu_cubic", kGeluCubic)}, name + ".a_x"), x}, name + ".a_x2"), x},
        name + ".a_x3");
    const std::string inner =
        node("Mul", {scalar("gelu_sqrt_2_over_pi", kGeluSqrt2OverPi), node("Add", {x, cubic}, name + ".x_plus_a_x3")},
             name + ".inner");
    const std::string one_plus_tanh =
        node("Add", {scalar("gelu_one", 1.0f), node("Tanh", {inner}, name + ".tanh")}, name + ".one_plus_tanh");
    return node("Mul", {node("Mul", {scalar("gelu_half", 0.5f), x}, name + ".half_x"), one_plus_tanh}, name);
  }

  // A layer described as several operators: each node's inputs resolved to the graph's names, the
  // last node's (first) output named after the layer.
  std::string composition(const Layer& layer, const LayerDescription& d, const std::string& x) {
    if (d.nodes.empty()) no_form(layer, "describes itself as onnx_nodes but lists no node");
    const std::string& name = layer.name();
    std::map<std::string, std::string> outputs{{"x", x}};
    constants_.clear();
    std::string y;
    for (size_t i = 0; i < d.nodes.size(); ++i) {
      const OnnxNode& n = d.nodes[i];
      const std::string which = "node " + std::to_string(i) + " (" + (n.op_type.empty() ? "?" : n.op_type) + ")";
      if (n.op_type.empty()) no_form(layer, "describes " + which + " with no op_type");
      std::vector<std::string> inputs;
      for (const std::string& in : n.inputs) inputs.push_back(node_input(layer, d, outputs, in, which));
      std::vector<onnx::AttributeProto> attributes;
      for (const auto& [key, v] : n.ints) attributes.push_back(int_attr(key, v));
      for (const auto& [key, v] : n.floats) attributes.push_back(float_attr(key, v));
      for (const auto& [key, v] : n.int_lists) attributes.push_back(ints_attr(key, v));
      for (const auto& [key, v] : n.float_lists) attributes.push_back(floats_attr(key, v));
      for (const auto& [key, v] : n.strings) attributes.push_back(string_attr(key, v));
      const bool last = i + 1 == d.nodes.size();
      const std::vector<std::string> named = n.outputs.empty() ? std::vector<std::string>{n.output} : n.outputs;
      std::vector<std::string> graph_names;
      for (size_t k = 0; k < named.size(); ++k)
        graph_names.push_back(last && k == 0 ? name : name + "." + (named[k].empty() ? std::to_string(i) : named[k]));
      const std::vector<std::string> made = node_outputs(n.op_type, inputs, graph_names, attributes);
      y = made[0];
      for (size_t k = 0; k < named.size(); ++k)
        if (!named[k].empty() && !outputs.emplace(named[k], made[k]).second)
          no_form(layer,
                  "describes " + which + " with the output '" + named[k] + "', a name an earlier input or node has");
    }
    return y;
  }

  // Constant K of a description, written once per layer as "<layer>.<name>".
  std::string description_constant(const Layer& layer, const LayerDescription& d, size_t k, const std::string& which) {
    if (k >= d.constants.size())
      no_form(layer, "describes " + which + " reading constant " + std::to_string(k) + ", but it has " +
                         std::to_string(d.constants.size()) + " constant(s)");
    if (auto it = constants_.find(k); it != constants_.end()) return it->second;
    const OnnxConstant& c = d.constants[k];
    const bool floats = !c.floats.empty();
    const size_t count = floats ? c.floats.size() : c.ints.size();
    if (c.name.empty() || static_cast<int64_t>(count) != shape_numel(c.shape))
      no_form(layer, "describes constant " + std::to_string(k) + " ('" + c.name + "') of shape " +
                         shape_string(c.shape) + " with " + std::to_string(count) +
                         " values: expected a name and as many values as the shape holds");
    const std::string tensor = layer.name() + "." + c.name;
    return constants_[k] =
               floats ? constant(tensor, c.shape, c.floats.data(), count) : int64_tensor(tensor, c.shape, c.ints);
  }

  std::string node_input(const Layer& layer, const LayerDescription& d,
                         const std::map<std::string, std::string>& outputs, const std::string& in,
                         const std::string& which) {
    const auto index = [&](const std::string& prefix) {
      char* end = nullptr;
      const unsigned long long k = std::strtoull(in.c_str() + prefix.size(), &end, 10);
      if (end == in.c_str() + prefix.size() || *end != '\0')
        no_form(layer, "describes " + which + " reading '" + in + "': expected " + prefix + "K, K an index");
      return static_cast<size_t>(k);
    };
    if (auto it = outputs.find(in); it != outputs.end()) return it->second;
    if (in.rfind("param:", 0) == 0) return param(layer, d, index("param:"));
    if (in.rfind("buffer:", 0) == 0) return buffer(layer, d, index("buffer:"));
    if (in.rfind("constant:", 0) == 0) return description_constant(layer, d, index("constant:"), which);
    if (in.rfind("scalar:", 0) == 0) {
      char* end = nullptr;
      const float value = std::strtof(in.c_str() + 7, &end);
      if (end == in.c_str() + 7 || *end != '\0' || !std::isfinite(value))
        no_form(layer, "describes " + which + " reading '" + in + "': expected scalar:V with V a finite number");
      return scalar("scalar_" + in.substr(7), value);
    }
    no_form(layer, "describes " + which + " reading '" + in +
                       "', which is not x, param:K, buffer:K, constant:K, scalar:V or an earlier node's output");
  }

  int64_t int_attribute(const Layer& layer, const LayerDescription& d, const std::string& key) const {
    for (const auto& [name, value] : d.ints)
      if (name == key) return value;
    no_form(layer, std::string("describes itself as ") + kind_name(d.kind) + " without the attribute '" + key + "'");
  }

  float float_attribute(const Layer& layer, const LayerDescription& d, const std::string& key) const {
    for (const auto& [name, value] : d.floats)
      if (name == key) return value;
    no_form(layer, std::string("describes itself as ") + kind_name(d.kind) + " without the attribute '" + key + "'");
  }

 public:
  // Each layer's output and its nodes (a block's own after those of its layers), for the check.
  std::vector<std::pair<const Layer*, std::string>> layer_outputs;
  std::map<std::string, std::string> node_layers;

  std::string layer_nodes(const Layer& layer, std::string x, Shape& shape) {
    const int first_node = graph_.node_size();
    const std::string y = layer_nodes_of(layer, std::move(x), shape);
    for (int k = first_node; k < graph_.node_size(); ++k) node_layers.emplace(graph_.node(k).name(), layer.name());
    layer_outputs.emplace_back(&layer, y);
    return y;
  }

 private:
  std::string layer_nodes_of(const Layer& layer, std::string x, Shape& shape) {
    const LayerDescription d = layer.describe();
    const Shape out = layer.output_shape(shape);
    const std::string& name = layer.name();
    std::string y;
    switch (d.kind) {
      case LayerKind::none:
        no_form(layer, "has no ONNX form: its describe() says LayerKind::none");
      case LayerKind::token_embedding: {
        // The ids' rows of the table, plus the first T rows of the position table; an embedding
        // without positions (params {weight} alone) is the Gather alone.
        if (d.params.size() == 1) {
          y = node("Gather", {param(layer, d, 0), x}, name, {int_attr("axis", 0)});
          break;
        }
        const std::string tokens = node("Gather", {param(layer, d, 0), x}, name + ".tokens", {int_attr("axis", 0)});
        const std::string positions =
            node("Slice", {param(layer, d, 1), int64_constant({0}), sequence_length(x), int64_constant({0})},
                 name + ".positions");
        y = node("Add", {tokens, positions}, name);
        break;
      }
      case LayerKind::layer_norm:
        y = node("LayerNormalization", {x, param(layer, d, 0), param(layer, d, 1)}, name,
                 {int_attr("axis", -1), float_attr("epsilon", float_attribute(layer, d, "epsilon"))});
        break;
      case LayerKind::gelu_tanh:
        y = gelu_tanh(x, name);
        break;
      case LayerKind::attention:
        y = attention(layer, d, x, shape);
        break;
      case LayerKind::tied_head:
        y = node("MatMul", {x, transposed(param(layer, d, 0))}, name);
        break;
      case LayerKind::token_linear:
        // MatMul takes any rank, as the layer does; Gemm takes [N, features] only.
        y = node("Add", {node("MatMul", {x, transposed(param(layer, d, 0))}, name + ".matmul"), param(layer, d, 1)},
                 name);
        break;
      case LayerKind::linear:
        // Linear takes any rank and flattens it; Gemm takes [N, features] only.
        if (shape.size() != 2) x = node("Flatten", {x}, name + ".flatten", {int_attr("axis", 1)});
        y = node("Gemm", {x, param(layer, d, 0), param(layer, d, 1)}, name, {int_attr("transB", 1)});
        break;
      case LayerKind::conv2d: {
        const int64_t k = int_attribute(layer, d, "kernel"), s = int_attribute(layer, d, "stride"),
                      p = int_attribute(layer, d, "padding");
        y = node("Conv", {x, param(layer, d, 0), param(layer, d, 1)}, name,
                 {ints_attr("kernel_shape", {k, k}), ints_attr("strides", {s, s}), ints_attr("pads", {p, p, p, p})});
        break;
      }
      case LayerKind::max_pool2d:
      case LayerKind::avg_pool2d: {
        const int64_t k = int_attribute(layer, d, "kernel"), s = int_attribute(layer, d, "stride");
        y = node(d.kind == LayerKind::max_pool2d ? "MaxPool" : "AveragePool", {x}, name,
                 {ints_attr("kernel_shape", {k, k}), ints_attr("strides", {s, s})});
        break;
      }
      case LayerKind::global_avg_pool2d:
        // GlobalAveragePool keeps [N, C, 1, 1]; the layer gives [N, C].
        y = node("Flatten", {node("GlobalAveragePool", {x}, name + ".pool")}, name, {int_attr("axis", 1)});
        break;
      case LayerKind::batch_norm2d:
        // Inference mode: normalised by the running statistics, as the layer evaluates.
        y = node("BatchNormalization",
                 {x, param(layer, d, 0), param(layer, d, 1), buffer(layer, d, 0), buffer(layer, d, 1)}, name,
                 {float_attr("epsilon", float_attribute(layer, d, "epsilon"))});
        break;
      case LayerKind::relu:
        y = node("Relu", {x}, name);
        break;
      case LayerKind::flatten:
        y = node("Flatten", {x}, name, {int_attr("axis", 1)});
        break;
      case LayerKind::dropout:
        y = node("Identity", {x}, name);  // outside training
        break;
      case LayerKind::residual: {
        if (d.branch.empty()) no_form(layer, "describes itself as a residual block with no branch");
        Shape branch_shape = shape, shortcut_shape = shape;
        const std::string branch = layers(d.branch, x, branch_shape);
        const std::string shortcut = d.shortcut.empty() ? x : layers(d.shortcut, x, shortcut_shape);
        y = node("Add", {branch, shortcut}, name);
        break;
      }
      case LayerKind::onnx_nodes:
        y = composition(layer, d, x);
        break;
      case LayerKind::onnx_operator: {
        if (d.op_type.empty()) no_form(layer, "describes itself as an ONNX operator but names none (op_type)");
        std::vector<std::string> inputs{x};
        for (size_t i = 0; i < d.params.size(); ++i) inputs.push_back(param(layer, d, i));
        for (size_t i = 0; i < d.buffers.size(); ++i) inputs.push_back(buffer(layer, d, i));
        std::vector<onnx::AttributeProto> attributes;
        for (const auto& [key, v] : d.ints) attributes.push_back(int_attr(key, v));
        for (const auto& [key, v] : d.floats) attributes.push_back(float_attr(key, v));
        y = node(d.op_type, inputs, name, attributes);
        break;
      }
    }
    shape = out;
    return y;
  }

  onnx::GraphProto& graph_;
  ParameterStore& store_;
  std::string model_;
  std::set<std::string> names_;
  std::map<ParamHandle, std::string> params_;
  std::map<BufferHandle, std::string> buffers_;
  std::map<size_t, std::string> constants_;        // the current composition's, by index
  std::map<std::string, std::string> shared_;      // constants by what they hold
  std::map<std::string, std::string> transposed_;  // weights by their initializer
  std::string sequence_length_, causal_mask_;
};

// The first dimensions of `dims` are left free under the names `free` (the batch "N", a token
// model's sequence "T"); the rest keep their sizes.
void set_tensor_type(onnx::ValueInfoProto* value, const std::string& name, onnx::TensorProto::DataType type,
                     const Shape& dims, const std::vector<std::string>& free) {
  value->set_name(name);
  auto* tensor = value->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(type);
  auto* shape = tensor->mutable_shape();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < free.size())
      shape->add_dim()->set_dim_param(free[i]);
    else
      shape->add_dim()->set_dim_value(dims[i]);
  }
}

// The batch the check runs: a few of the data file's samples, or two windows of token ids, shorter
// than the context where the model takes them (the evaluator's attention is quadratic in T).
OnnxSample check_sample(const Model& model, const data::DatasetInfo& info, const OnnxExport& e) {
  constexpr int64_t kSamples = 4, kWindows = 2, kTokens = 64;
  if (e.onnx.context == 0) return data_sample(info, e.normalisation, kSamples);
  int64_t length = std::min(e.onnx.context, kTokens);
  try {
    model.output_shape({kWindows, length});
  } catch (const Error&) {
    length = e.onnx.context;  // a model that takes whole windows alone
  }
  return token_sample(e.onnx.classes, kWindows, length);
}

}  // namespace

std::string InputNormalisation::text() const {
  std::string out;
  if (divide_by != 0) out = "x / " + number(divide_by);
  if (!mean.empty()) {
    if (!out.empty()) out += ", then ";
    out += "(x - " + values(mean) + ") / " + values(stddev);
  }
  return out.empty() ? "none" : out;
}

InputNormalisation input_normalisation(const data::DatasetInfo& info) {
  // As the reader (datasets/sharded_reader.cpp): uint8 samples become (v / 255 - mean) / std
  // (v / 255 without the attributes), float32 ones (x - mean) * (1 / std).
  InputNormalisation n;
  const bool u8 = info.x_type == "uint8";
  if (u8) n.divide_by = 255.0f;
  if (!info.channel_mean.empty()) {
    n.mean = info.channel_mean;
    n.stddev = info.channel_std;
  } else if (info.normalized_attrs) {
    n.mean = {info.mean};
    n.stddev = {info.stddev};
  }
  n.multiply_by_reciprocal = !u8;
  return n;
}

OnnxModel onnx_model(const Model& model, ParameterStore& store, const std::string& model_name,
                     const Shape& sample_shape, const InputNormalisation& normalisation,
                     const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::vector<const Layer*> stack = model.export_layers();
  if (stack.empty())
    throw Error("model '" + model_name +
                "' has no ONNX form: it is not a stack of layers (Model::export_layers() is empty; docs/plugins.md, "
                "\"A layer's export form\")");
  Shape input{1};
  input.insert(input.end(), sample_shape.begin(), sample_shape.end());
  const Shape logits = model.output_shape(input);
  // A language model takes token ids [N, T] and gives a row of logits per token.
  const bool tokens = model.sequence_length() > 0;
  if (tokens)
    MGT_CHECK(input.size() == 2 && logits.size() == 3, Error,
              "model '" + model_name + "' gives " + shape_string(logits) + " for token ids " + shape_string(input) +
                  ", expected logits [N, T, vocab]");
  else
    MGT_CHECK(logits.size() == 2, Error,
              "model '" + model_name + "' gives " + shape_string(logits) + " for input " + shape_string(input) +
                  ", expected logits [N, classes]");

  onnx::ModelProto proto;
  proto.set_ir_version(onnx::IR_VERSION);
  proto.set_producer_name("mgtrain");
  proto.set_producer_version(MGTRAIN_VERSION);
  proto.set_doc_string(tokens ? "input: int64 token ids [N, T], T from 1 to " + std::to_string(input[1]) +
                                    "; output: logits [N, T, vocab], each position's for the token after it"
                              : "input: float32 samples as stored in the data file, normalised in the graph: " +
                                    normalisation.text() + "; output: logits");
  proto.add_opset_import()->set_version(kOpset);
  for (const auto& [key, value] : metadata) {
    auto* prop = proto.add_metadata_props();
    prop->set_key(key);
    prop->set_value(value);
  }
  onnx::GraphProto& graph = *proto.mutable_graph();
  graph.set_name(model_name);
  // int64 ids, as ONNX language models take them: Gather indexes with them as they are.
  const std::vector<std::string> free = tokens ? std::vector<std::string>{"N", "T"} : std::vector<std::string>{"N"};
  set_tensor_type(graph.add_input(), "input", tokens ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT, input,
                  free);

  GraphBuilder builder(graph, store, model_name);
  builder.unique("input");
  builder.unique("logits");
  std::string x = "input";
  // The reader's normalisation, with the same float operations in the same order (token ids have
  // none).
  Shape stat_dims(input.size() - 1, 1);  // one value per channel, broadcast over the rest
  if (!tokens && normalisation.divide_by != 0) {
    const float scale = normalisation.divide_by;
    x = builder.node("Div", {x, builder.constant("input_scale", {1}, &scale, 1)}, "input_scaled");
  }
  if (!tokens && !normalisation.mean.empty()) {
    const size_t c = normalisation.mean.size();
    Shape dims = c == 1 ? Shape{1} : stat_dims;
    if (c != 1) dims[0] = static_cast<int64_t>(c);
    x = builder.node("Sub", {x, builder.constant("input_mean", dims, normalisation.mean.data(), c)}, "input_centred");
    if (normalisation.multiply_by_reciprocal) {
      std::vector<float> inverse;
      for (float s : normalisation.stddev) inverse.push_back(1.0f / s);
      x = builder.node("Mul", {x, builder.constant("input_inv_std", dims, inverse.data(), c)}, "input_normalised");
    } else {
      x = builder.node("Div", {x, builder.constant("input_std", dims, normalisation.stddev.data(), c)},
                       "input_normalised");
    }
  }
  const int64_t before = builder.nodes();
  Shape shape = input;
  x = builder.layers(stack, x, shape);
  // The last node's output is the graph's.
  if (builder.nodes() > before && graph.node(graph.node_size() - 1).output(0) == x) {
    graph.mutable_node(graph.node_size() - 1)->set_output(0, "logits");
    for (auto& [layer, output] : builder.layer_outputs)
      if (output == x) output = "logits";
  } else {
    builder.node("Identity", {x}, "logits_identity");
    graph.mutable_node(graph.node_size() - 1)->set_output(0, "logits");
  }
  set_tensor_type(graph.add_output(), "logits", onnx::TensorProto::FLOAT, logits, free);

  OnnxModel result;
  result.nodes = graph.node_size();
  result.classes = logits.back();
  result.context = tokens ? input[1] : 0;
  result.layer_outputs = std::move(builder.layer_outputs);
  result.node_layers = std::move(builder.node_layers);
  if (!proto.SerializeToString(&result.bytes))
    throw Error("model '" + model_name + "': the ONNX graph cannot be serialized (over 2 GB?)");
  return result;
}

OnnxExport export_onnx(const std::string& checkpoint, const std::string& out, const std::string& data_path,
                       const std::vector<std::string>& plugin_paths, bool check) {
  AtomicFile file(out, "ONNX file");  // refuses an output that cannot be written before any work
  CheckpointModel loaded(checkpoint, plugin_paths);
  const CheckpointMeta& stored = loaded.stored;
  const Config& config = loaded.config;
  Model* model = loaded.model.get();
  ParameterStore& store = loaded.store;

  OnnxExport result;
  result.model_name = plugin_choice(config).model;
  const int64_t context = model->sequence_length();
  std::vector<std::pair<std::string, std::string>> metadata{
      {"mgtrain.model", result.model_name},
      {"mgtrain.checkpoint", checkpoint},
      {"mgtrain.step", std::to_string(stored.step)},
  };
  // A language model's input is the token ids themselves: no data file gives it a shape or
  // statistics, so one is read only when --data names it, to check that its ids fit the model.
  result.data_path = data_path.empty() && context == 0 ? config.get_string("data.train") : data_path;
  data::DatasetInfo info;
  if (!result.data_path.empty()) {
    try {
      info = data::open_data_info(result.data_path, config.get_string("data.x_name"), config.get_string("data.y_name"),
                                  context, result.model_name);
    } catch (const Error& e) {
      throw DataError(std::string(e.what()) + (data_path.empty() ? " (the checkpoint's data.train, which gives the "
                                                                   "sample shape and normalisation; --data names "
                                                                   "another file)"
                                                                 : ""));
    }
  }
  if (context > 0) {
    result.sample_shape = {context};
    const int64_t vocab = model->output_shape({1, context}).back();
    if (!result.data_path.empty() && info.num_classes > vocab)
      throw DataError("token file '" + result.data_path + "' has vocab_size " + std::to_string(info.num_classes) +
                      ", more than the vocabulary of " + std::to_string(vocab) + " that model '" + result.model_name +
                      "' gives logits for: expected at most " + std::to_string(vocab));
    metadata.emplace_back("mgtrain.input", "int64 [N, T] token ids, T from 1 to " + std::to_string(context));
    metadata.emplace_back("mgtrain.context", std::to_string(context));
    metadata.emplace_back("mgtrain.vocab", std::to_string(vocab));
  } else {
    result.sample_shape = info.sample_shape;
    result.normalisation = input_normalisation(info);
    Shape input{1};
    input.insert(input.end(), info.sample_shape.begin(), info.sample_shape.end());
    try {
      model->output_shape(input);
    } catch (const Error& e) {
      throw DataError("data file '" + result.data_path + "': the model cannot take its samples of shape " +
                      shape_string(info.sample_shape) + ": " + e.what());
    }
    metadata.emplace_back("mgtrain.input", "float32 [N, " + shape_string(info.sample_shape).substr(1) +
                                               " samples as stored in '" + result.data_path + "' (" + info.x_type +
                                               ")");
    metadata.emplace_back("mgtrain.normalisation", result.normalisation.text());
    if (!info.class_names.empty()) {
      std::string names;
      for (const auto& n : info.class_names) names += (names.empty() ? "" : ",") + n;
      metadata.emplace_back("mgtrain.class_names", names);
    }
  }
  try {
    result.onnx = onnx_model(*model, store, result.model_name, result.sample_shape, result.normalisation, metadata);
    if (check)
      result.check = check_onnx_model(*model, result.onnx, result.model_name, check_sample(*model, info, result));
  } catch (const DataError&) {
    throw;
  } catch (const Error& e) {
    throw Error("cannot export checkpoint '" + checkpoint + "' to ONNX: " + e.what());
  }
  file.commit(result.onnx.bytes);
  return result;
}

}  // namespace mgt
