#include "tools/onnx_check.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"
#include "tools/onnx_evaluate.hpp"

namespace mgt {

namespace {

std::string figure(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

// How far `got` (the graph's) is from `expected` (the forward's): the largest absolute difference
// and the largest |expected|, the scale it is measured against. Equal non-finite values agree.
struct Difference {
  double largest = 0, scale = 0;
  double relative() const { return largest == 0 ? 0 : scale > 0 ? largest / scale : HUGE_VAL; }
  bool within() const { return relative() <= kOnnxCheckTolerance; }
};

Difference difference(const std::vector<float>& expected, const std::vector<float>& got) {
  Difference d;
  for (size_t k = 0; k < expected.size(); ++k) {
    const double e = expected[k], g = got[k];
    if (std::isfinite(e)) d.scale = std::max(d.scale, std::fabs(e));
    if (e == g || (std::isnan(e) && std::isnan(g))) continue;
    const double diff = std::fabs(e - g);
    d.largest = std::isnan(diff) ? HUGE_VAL : std::max(d.largest, diff);
  }
  return d;
}

// The CPU executor may keep [B, C, H, W] activations in channel blocks of 8 or 16 between layers
// that take them (LayerHints::blocked_activations): a layer's output as the forward shows it may be
// in either layout. Returns it in plain NCHW, as the graph's, for block `b`.
std::vector<float> unblocked(const std::vector<float>& blocked, const Shape& dims, int64_t b) {
  const int64_t n = dims[0], c = dims[1], plane = dims[2] * dims[3];
  std::vector<float> plain(blocked.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < plane; ++p)
        plain[static_cast<size_t>((i * c + ch) * plane + p)] =
            blocked[static_cast<size_t>(((i * (c / b) + ch / b) * plane + p) * b + ch % b)];
  return plain;
}

// The closest of the layouts the forward's output may be in.
Difference closest(const std::vector<float>& forward, const Shape& dims, const std::vector<float>& graph) {
  Difference best = difference(forward, graph);
  if (dims.size() == 4)
    for (const int64_t b : {8, 16})
      if (dims[1] % b == 0 && !best.within()) {
        const Difference d = difference(unblocked(forward, dims, b), graph);
        if (d.relative() < best.relative()) best = d;
      }
  return best;
}

// One layer's output as the model's forward gave it.
struct Seen {
  const Layer* layer;
  const float* memory;  // where the executor keeps it: a fused ReLU after it shares it
  Shape dims;
  std::vector<float> values;
};

// "largest difference 0.0123, 0.0061 of the largest |value| 2.01, expected at most 0.0001"
std::string measured(const Difference& d) {
  return "largest difference " + figure(d.largest) + ", " + figure(d.relative()) + " of the largest |value| " +
         figure(d.scale) + ", expected at most " + figure(kOnnxCheckTolerance);
}

}  // namespace

OnnxSample data_sample(const data::DatasetInfo& info, const InputNormalisation& normalisation, int64_t rows) {
  OnnxSample sample;
  rows = std::min(rows, info.num_samples);
  sample.shape = {rows};
  sample.shape.insert(sample.shape.end(), info.sample_shape.begin(), info.sample_shape.end());
  sample.graph_input.resize(static_cast<size_t>(shape_numel(sample.shape)));
  sample.description =
      "the first " + std::to_string(rows) + " sample" + (rows == 1 ? "" : "s") + " of '" + info.path + "'";
  {
    std::lock_guard lock(data::hdf5_mutex());
    data::h5::silence_errors();
    data::DatasetInfo fresh;
    data::h5::Opened o = data::h5::open_validated(info.path, info.x_name, info.y_name, fresh);
    hsize_t count[H5S_MAX_RANK], start[H5S_MAX_RANK] = {};
    const int rank = static_cast<int>(sample.shape.size());
    if (rank > H5S_MAX_RANK) throw DataError("data file '" + info.path + "': samples of rank " + std::to_string(rank));
    std::copy(sample.shape.begin(), sample.shape.end(), count);
    data::h5::Id file_space = data::h5::space(H5Dget_space(o.x.get()));
    data::h5::Id memory = data::h5::space(H5Screate_simple(rank, count, nullptr));
    // HDF5 converts uint8 to float: the graph takes pixels as 0..255.
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(o.x.get(), H5T_NATIVE_FLOAT, memory.get(), file_space.get(), H5P_DEFAULT, sample.graph_input.data()) <
            0)
      throw DataError("data file '" + info.path + "': reading the first " + std::to_string(rows) + " rows of '/" +
                      info.x_name + "' for the export's check failed: " + data::h5::error_text());
  }
  // The reader's normalisation, as the graph does it (onnx_export.cpp): x / 255, then (x - mean)
  // / std, or (x - mean) * (1 / std) for float32 samples, per channel where there are several.
  sample.model_input = sample.graph_input;
  const size_t channels = normalisation.mean.size();
  const int64_t plane = channels > 1 ? shape_numel(info.sample_shape) / static_cast<int64_t>(channels) : 1;
  for (size_t k = 0; k < sample.model_input.size(); ++k) {
    float& x = sample.model_input[k];
    if (normalisation.divide_by != 0) x = x / normalisation.divide_by;
    if (channels == 0) continue;
    const size_t c = channels == 1 ? 0 : static_cast<size_t>(static_cast<int64_t>(k) / plane) % channels;
    x = x - normalisation.mean[c];
    x = normalisation.multiply_by_reciprocal ? x * (1.0f / normalisation.stddev[c]) : x / normalisation.stddev[c];
  }
  return sample;
}

OnnxSample token_sample(int64_t vocab, int64_t windows, int64_t length) {
  OnnxSample sample;
  sample.tokens = true;
  sample.shape = {windows, length};
  sample.description = std::to_string(windows) + " windows of " + std::to_string(length) + " random token ids";
  uint64_t state = 0x9e3779b97f4a7c15ull;  // splitmix64: the same ids on every machine
  for (int64_t k = 0; k < windows * length; ++k) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    sample.graph_input.push_back(static_cast<float>(z % static_cast<uint64_t>(vocab)));
  }
  sample.model_input = sample.graph_input;
  return sample;
}

OnnxCheck check_onnx_model(Model& model, const OnnxModel& onnx, const std::string& model_name,
                           const OnnxSample& sample) {
  OnnxCheck result;
  result.sample = sample.description;

  // The model's forward in evaluation, keeping each layer's output as it is given.
  std::vector<Seen> seen;
  const std::function<void(const Layer&, const Tensor&)> keep = [&](const Layer& layer, const Tensor& out) {
    seen.push_back({&layer, out.data(), out.shape(), std::vector<float>(out.data(), out.data() + out.numel())});
  };
  StepContext ctx;
  ctx.training = false;
  ctx.after_layer = &keep;
  Tensor input(sample.shape);
  std::copy(sample.model_input.begin(), sample.model_input.end(), input.data());
  const Tensor& out = model.forward(input, ctx);
  const std::vector<float> logits(out.data(), out.data() + out.numel());

  // The graph on the same batch, keeping every layer's output.
  onnx::ModelProto proto;
  if (!proto.ParseFromString(onnx.bytes))
    throw Error("model '" + model_name + "': the exported graph cannot be read back");
  onnx_eval::Value graph_input;
  graph_input.dims = sample.shape;
  graph_input.int64 = sample.tokens;
  if (sample.tokens)
    graph_input.i.assign(sample.graph_input.begin(), sample.graph_input.end());
  else
    graph_input.f = sample.graph_input;
  std::set<std::string> wanted{"logits"};
  for (const auto& [layer, name] : onnx.layer_outputs) wanted.insert(name);
  std::map<std::string, onnx_eval::Value> graph;
  try {
    graph = onnx_eval::run(proto.graph(), {{"input", graph_input}}, wanted);
  } catch (const onnx_eval::Unsupported& e) {
    const auto layer = onnx.node_layers.find(e.node());
    result.not_checked =
        (layer != onnx.node_layers.end() ? "layer '" + layer->second + "': " : std::string()) + e.what();
    return result;
  } catch (const Error& e) {
    throw Error("model '" + model_name + "': the exported graph cannot run on " + sample.description + ": " + e.what());
  }
  result.checked = true;

  std::map<const Layer*, std::string> output_of(onnx.layer_outputs.begin(), onnx.layer_outputs.end());
  std::set<std::string> compared;  // the last layer's output is the logits: counted once
  const auto note = [&](const std::string& tensor, const Difference& d) {
    compared.insert(tensor);
    result.outputs = static_cast<int64_t>(compared.size());
    result.largest = std::max(result.largest, d.relative());
  };
  // In the order the forward gave them (a block's layers before the block, as in the graph): the
  // first that differs is the layer to blame, those before it agreeing.
  for (size_t k = 0; k < seen.size(); ++k) {
    const auto name = output_of.find(seen[k].layer);
    if (name == output_of.end()) continue;
    const onnx_eval::Value& got = graph.at(name->second);
    const std::string& layer = seen[k].layer->name();
    if (got.int64 || got.numel() != shape_numel(seen[k].dims))
      throw Error("model '" + model_name + "': layer '" + layer + "' gives " + shape_string(got.dims) +
                  " in the exported graph, " + shape_string(seen[k].dims) + " in its forward, on " +
                  sample.description + " (docs/plugins.md, \"A layer's export form\")");
    Difference d = closest(seen[k].values, seen[k].dims, got.f);
    // A ReLU the layer runs itself (fused_relu.hpp) writes over its output in the same memory: the
    // forward then shows the ReLU's output for this layer too.
    if (!d.within() && k + 1 < seen.size() && seen[k + 1].memory == seen[k].memory) {
      const auto next = output_of.find(seen[k + 1].layer);
      if (next != output_of.end() && graph.at(next->second).numel() == got.numel()) {
        const Difference fused = closest(seen[k].values, seen[k].dims, graph.at(next->second).f);
        if (fused.relative() < d.relative()) d = fused;
      }
    }
    if (!d.within())
      throw Error("model '" + model_name + "': layer '" + layer +
                  "' computes another output in the exported graph "
                  "than in its forward, on " +
                  sample.description + ": " + measured(d) +
                  " (its describe() does not say what its forward() does: docs/plugins.md, \"A layer's export "
                  "form\"; --no-check writes the file unchecked)");
    note(name->second, d);
  }
  const onnx_eval::Value& got = graph.at("logits");
  if (got.numel() != static_cast<int64_t>(logits.size()))
    throw Error("model '" + model_name + "': the exported graph gives logits " + shape_string(got.dims) +
                ", its forward " + shape_string(out.shape()) + ", on " + sample.description);
  const Difference d = difference(logits, got.f);
  if (!d.within())
    throw Error("model '" + model_name + "': the exported graph gives other logits than the model's forward on " +
                sample.description + ": " + measured(d) +
                ", though every layer output compared agrees (--no-check writes the file unchecked)");
  note("logits", d);
  return result;
}

}  // namespace mgt
