#pragma once
// A reference evaluator of ONNX graphs, float32 on the CPU: `mgtrain export` runs the graph it
// wrote on a sample batch and compares it with the model's own forward (onnx_check.hpp), with no
// ONNX Runtime or Python needed. It computes the operators the exporter writes for the SDK's layers
// and those a layer's description commonly names (operators() lists them), opset 17, in plain
// loops; products and sums accumulate in double, so it is the reference, not the model's kernels.
// Slow next to a real runtime: meant for a few samples.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/tensor.hpp"

namespace onnx {
class GraphProto;
}

namespace mgt::onnx_eval {

// A tensor of the graph: float32 (f) or int64 (i, shapes and indices).
struct Value {
  bool int64 = false;
  Shape dims;
  std::vector<float> f;
  std::vector<int64_t> i;
  int64_t numel() const { return shape_numel(dims); }
};

// An operator, or an attribute of one, that the evaluator does not compute: the graph may be right,
// it cannot say. `node` is the node's name.
class Unsupported : public Error {
 public:
  Unsupported(std::string node, const std::string& what) : Error(what), node_(std::move(node)) {}
  const std::string& node() const { return node_; }

 private:
  std::string node_;
};

// Runs `graph` on `inputs` (by the graph's input names) and returns the tensors named in `wanted`
// (the graph's outputs or any node's); the others are freed once no later node reads them. Throws
// Unsupported as above, Error naming the node for inputs that do not fit it (shapes, indices).
std::map<std::string, Value> run(const onnx::GraphProto& graph, const std::map<std::string, Value>& inputs,
                                 const std::set<std::string>& wanted);

// The operators run() computes, sorted.
std::vector<std::string> operators();

}  // namespace mgt::onnx_eval
