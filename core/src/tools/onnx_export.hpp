#pragma once
// `mgtrain export`: a checkpoint's model as an ONNX file for ONNX Runtime and other frameworks.
// The graph takes the data file's samples as stored ("input", float32 [N, ...sample shape], N
// left free), normalises them as the data reader does, runs the model's layers as they evaluate
// (batch norm on its running statistics, dropout the identity) and gives "logits" [N, classes]. A
// language model takes token ids ("input", int64 [N, T]) and gives "logits" [N, T, vocab].
// It is built from the layers' descriptions (Layer::describe), so no ONNX type reaches the SDK.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mgtrain/model.hpp"

namespace mgt {

namespace data {
struct DatasetInfo;
}

// What the data reader does to a raw sample before the model sees it, which the graph repeats
// with the same float operations in the same order.
struct InputNormalisation {
  float divide_by = 0;                  // uint8 samples are divided by 255 first; 0: not
  std::vector<float> mean;              // one value for every element, or one per channel; empty: none
  std::vector<float> stddev;            // as mean
  bool multiply_by_reciprocal = false;  // float32 samples: (x - mean) * (1 / std), as the reader
  std::string text() const;             // "x / 255, then (x - 0.286) / 0.353", for messages and metadata
};
InputNormalisation input_normalisation(const data::DatasetInfo& info);

struct OnnxModel {
  std::string bytes;  // a serialized onnx.ModelProto
  int64_t nodes = 0;
  int64_t classes = 0;  // a language model's vocabulary
  int64_t context = 0;  // a language model's longest sequence T; 0 for a model of samples
  // Each layer's output tensor in the graph, in the order the graph computes them (a residual
  // block's layers before the block), for the check against the model's forward (onnx_check.hpp).
  std::vector<std::pair<const Layer*, std::string>> layer_outputs;
  // The layer each node of the graph belongs to, by node name, for messages.
  std::map<std::string, std::string> node_layers;
};

// Builds the graph of `model` (its parameters and buffers in `store`) for samples of
// `sample_shape`. A language model (Model::sequence_length() > 0) takes int64 token ids
// "input" [N, T] instead, sample_shape {longest T}, T free from 1 to that, without normalisation,
// and gives "logits" [N, T, vocab]. Throws Error naming the model and the layer when a layer has
// no ONNX form (LayerKind::none), or the model is no stack of layers (Model::export_layers() empty).
OnnxModel onnx_model(const Model& model, ParameterStore& store, const std::string& model_name,
                     const Shape& sample_shape, const InputNormalisation& normalisation,
                     const std::vector<std::pair<std::string, std::string>>& metadata = {});

// What check_onnx_model (onnx_check.hpp) found; `checked` false with `not_checked` empty: not run
// (--no-check).
struct OnnxCheck {
  bool checked = false;
  std::string not_checked;  // why the graph could not be checked (an operator the evaluator lacks)
  int64_t outputs = 0;      // layer outputs compared, the logits included
  double largest = 0;       // the largest difference, relative to each output's largest |value|
  std::string sample;       // the batch it ran on, for messages
};

struct OnnxExport {
  std::string model_name;
  std::string data_path;  // where the sample shape and normalisation came from (a language model: "" or --data)
  Shape sample_shape;
  InputNormalisation normalisation;
  OnnxModel onnx;
  OnnxCheck check;
};

// Rebuilds the model from the checkpoint as `mgtrain eval` does and writes it to `out` under a
// temporary name in the same directory, renamed when complete: a failure leaves no file. The
// sample shape and normalisation come from `data_path`, or when it is empty from the
// checkpoint's data.train. A language model reads no data file unless `data_path` names one, which
// is then checked to be a token file within the model's vocabulary. With `check`, the graph is run
// on a sample batch (the data file's first samples; random token ids for a language model) and
// compared with the model's forward before anything is written (check_onnx_model): a layer whose
// output differs is refused by name.
OnnxExport export_onnx(const std::string& checkpoint, const std::string& out, const std::string& data_path,
                       const std::vector<std::string>& plugin_paths, bool check = true);

}  // namespace mgt
