// Model plugin `layers`: a model declared in the config, as a list of SDK layers in model.layers
// (the grammar and the layer names: layer_list.hpp), checked against model.input_shape before
// any step.
#include <string>
#include <utility>

#include "layer_list.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.input_shape", mgt::KeyType::integer_list, "1,28,28", "sample shape C,H,W (taken from data.train if unset)"},
    {"model.layers", mgt::KeyType::string, nullptr,
     "the layers, comma-separated: conv C kK [sS] [pP], linear N, maxpool K [sS], avgpool K [sS], gap, bn, relu, "
     "flatten, dropout P, residual { BRANCH } (a shortcut follows the branch after a bar); README: A model declared "
     "in the config"},
};

class Layers final : public mgt::SequentialModel {
 public:
  explicit Layers(const mgt::ConfigSection& config) {
    const std::string text = config.get_string("layers");
    const auto& value = config.root().values().at(config.name() + ".layers");
    const std::string key = "config key '" + config.name() + ".layers' (" + value.source + "): ";
    const auto input_shape = config.get_size_list("input_shape", mgt::kMaxModelSize);
    try {
      const auto entries = mgt::layer_list::parse(text);
      auto layers = mgt::layer_list::build(entries, input_shape);
      // The loss takes [B, classes] logits.
      mgt::Shape shape{1};
      for (int64_t d : input_shape) shape.push_back(d);
      for (const auto& layer : layers) shape = layer->output_shape(shape);
      if (shape.size() != 2)
        throw mgt::ConfigError("the last entry '" + entries.back().text + "' gives " + mgt::shape_string(shape) +
                               " for a batch of 1; expected logits [B, classes]: end with linear N");
      for (auto& layer : layers) add(std::move(layer));
    } catch (const mgt::ConfigError& error) {
      throw mgt::ConfigError(key + error.what());
    }
  }
};

}  // namespace

MGT_MODEL_PLUGIN("layers", "1.0.0", "a model declared in the config: model.layers lists its SDK layers", kKeys, Layers)
