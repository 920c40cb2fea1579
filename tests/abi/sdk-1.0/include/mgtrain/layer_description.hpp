#pragma once
// What a layer computes, in terms another framework can rebuild: `mgtrain export` writes a model's
// layers as ONNX from these descriptions. A description holds no framework's types: a kind, named
// attributes, the parameters and buffers the layer reads (handles into the store it declared
// into) and, for a block, the layers inside it. A layer that cannot say what it computes keeps
// Layer::describe()'s default, LayerKind::none, and a model holding one cannot be exported.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mgtrain/parameters.hpp"

namespace mgt {

class Layer;

enum class LayerKind {
  none,               // no export form
  linear,             // params {weight [out, in], bias [out]}; an input of higher rank is flattened first
  conv2d,             // params {weight [out_c, in_c, k, k], bias [out_c]}; ints kernel, stride, padding
  max_pool2d,         // ints kernel, stride (no padding, windows that fit)
  avg_pool2d,         // ints kernel, stride (no padding, windows that fit)
  global_avg_pool2d,  // [B, C, H, W] -> [B, C]
  batch_norm2d,       // params {weight, bias}, buffers {running_mean, running_var}; floats epsilon
  relu,               // max(x, 0)
  flatten,            // [B, ...] -> [B, features]
  dropout,            // the identity outside training
  residual,           // branch(x) + shortcut(x); an empty shortcut is the identity
  token_embedding,    // params {weight [vocab, dim], position [positions, dim]}: [B, T] ids -> [B, T, dim];
                      // {weight} alone: no position term (make_token_embedding with kNoPositions)
  layer_norm,         // params {weight, bias} over the last dimension; floats epsilon
  gelu_tanh,          // GELU, tanh form
  attention,          // [B, T, 3 dim] -> [B, T, dim]; ints heads, causal (0 or 1)
  tied_head,          // params {the embedding's weight [vocab, dim]}: x weight^T, no bias
  token_linear,       // linear over the last dimension: params {weight [out, in], bias [out]}
  onnx_operator,      // one ONNX operator, op_type (below)
  onnx_nodes,         // several ONNX operators, nodes (below): a layer that is a composition
};

// One operator of an onnx_nodes description. An input is the layer's input "x", a parameter
// "param:K" or buffer "buffer:K" (K indexes params or buffers), a constant "constant:K" (K indexes
// the description's constants), a float32 scalar "scalar:V" ("scalar:0.5"), or an output of an
// earlier node of the layer. Swish, x * sigmoid(x):
//   {{"Sigmoid", {"x"}, "gate"}, {"Mul", {"x", "gate"}, "y"}}
// and GELU's erf form, x * 0.5 * (1 + erf(x / sqrt 2)):
//   {{"Div", {"x", "scalar:1.41421356"}, "u"}, {"Erf", {"u"}, "e"}, {"Add", {"e", "scalar:1"}, "one_plus"},
//    {"Mul", {"x", "one_plus"}, "x_one_plus"}, {"Mul", {"x_one_plus", "scalar:0.5"}, "y"}}
struct OnnxNode {
  std::string op_type;                                // default domain, opset 17
  std::vector<std::string> inputs;                    // as above
  std::string output;                                 // its name for later nodes; the last node's is the layer's
  std::vector<std::pair<std::string, int64_t>> ints;  // named integer attributes
  std::vector<std::pair<std::string, float>> floats;  // named real attributes
  // Named list and string attributes: Transpose's perm, a Resize's mode. (Since opset 13 a Split's
  // sizes and a Reshape's shape are inputs: an int64 constant.)
  std::vector<std::pair<std::string, std::vector<int64_t>>> int_lists;
  std::vector<std::pair<std::string, std::vector<float>>> float_lists;
  std::vector<std::pair<std::string, std::string>> strings;
  // Several outputs (Split's parts), named for later nodes; when set, `output` is not read. The
  // layer's output is the last node's first.
  std::vector<std::string> outputs;
};

// A constant tensor of a description, an input "constant:K" of its nodes (written as an ONNX
// initializer): float32 `floats` or, when that is empty, int64 `ints`, of `shape` (row-major; its
// element count must match). A table the layer computes on the host (RoPE's cos and sin), a
// Reshape's target shape, a Split's sizes.
struct OnnxConstant {
  std::string name;  // the initializer is "<layer>.<name>"
  std::vector<int64_t> shape;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

// onnx_operator: the ONNX operator `op_type` (default domain, opset 17) over (input, params...,
// buffers...), with one output; `ints` and `floats` become its attributes. For a layer of a
// plugin's own that one operator computes in evaluation (Tanh, LeakyRelu with alpha, Mul by a
// parameter, ...).
struct LayerDescription {
  LayerKind kind = LayerKind::none;
  std::string op_type;                                // onnx_operator: "Tanh", "LeakyRelu", ...
  std::vector<std::pair<std::string, int64_t>> ints;  // named integer attributes
  std::vector<std::pair<std::string, float>> floats;  // named real attributes
  std::vector<ParamHandle> params;                    // in the order the kind lists them
  std::vector<BufferHandle> buffers;                  // in the order the kind lists them
  std::vector<const Layer*> branch, shortcut;         // residual
  std::vector<OnnxNode> nodes;                        // onnx_nodes, in order
  // Appended: the constants its nodes read ("constant:K").
  std::vector<OnnxConstant> constants;
};

}  // namespace mgt
