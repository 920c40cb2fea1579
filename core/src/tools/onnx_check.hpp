#pragma once
// `mgtrain export`'s check of the graph it wrote: the graph, run by the project's own evaluator
// (onnx_evaluate.hpp) on a sample batch, must give what the model's own forward gives, at every
// layer's output and at the logits, within kOnnxCheckTolerance. A layer whose description does not
// compute what its forward does (an RMSNorm described without its epsilon) is refused by name.
#include <cstdint>
#include <string>
#include <vector>

#include "mgtrain/model.hpp"
#include "tools/onnx_export.hpp"

namespace mgt {

namespace data {
struct DatasetInfo;
}

// The largest difference allowed between a layer's output in the graph and in the model's forward,
// relative to the largest |value| of that output in the forward: far above what a different order
// of float operations gives (about 1e-6 at most on the shipped models), far below a wrong epsilon or constant.
constexpr double kOnnxCheckTolerance = 1e-4;

// A batch for the check: what the graph takes ("input", raw samples or token ids) and what the
// model's forward takes (normalised samples; token ids as floats).
struct OnnxSample {
  std::string description;  // "the first 4 samples of 'train.h5'", for messages
  Shape shape;              // [N, ...sample shape], or a language model's [N, T]
  bool tokens = false;      // the graph's input is int64 ids
  std::vector<float> graph_input;
  std::vector<float> model_input;
};

// The first `rows` samples of a sample file as stored, normalised for the model as the data reader
// does (`normalisation`, the graph's own). Throws DataError naming the file when they cannot be read.
OnnxSample data_sample(const data::DatasetInfo& info, const InputNormalisation& normalisation, int64_t rows);
// `windows` windows of `length` token ids below `vocab`, drawn from a fixed seed.
OnnxSample token_sample(int64_t vocab, int64_t windows, int64_t length);

// Runs `onnx` (onnx_model() of `model`) and `model`'s forward, in evaluation, on `sample`, and
// compares each layer's output the forward shows (StepContext::after_layer), in the graph's order,
// then the logits. Throws Error naming the first layer whose output differs beyond
// kOnnxCheckTolerance, with the difference; returns not checked (and why) when the graph uses an
// operator the evaluator does not compute.
OnnxCheck check_onnx_model(Model& model, const OnnxModel& onnx, const std::string& model_name,
                           const OnnxSample& sample);

}  // namespace mgt
