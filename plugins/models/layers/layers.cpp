// Model plugin `layers`: a model declared in the config, as a list of SDK layers in model.layers
// (the grammar and the layer names: layer_list.hpp), checked against model.input_shape before
// any step. A list that starts with embed is a language model: it reads token files in windows of
// model.input_shape's one integer T and gives logits [rows, T, vocabulary].
#include <cstdint>
#include <string>
#include <utility>

#include "layer_list.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.input_shape", mgt::KeyType::integer_list, "1,28,28",
     "sample shape C,H,W or features (taken from data.train's images if unset); for a list that starts with embed, "
     "T: the window of token ids"},
    {"model.layers", mgt::KeyType::string, nullptr,
     "the layers, comma-separated: conv C kK [sS] [pP], linear N, maxpool K [sS], avgpool K [sS], gap, bn, relu, "
     "flatten, dropout P, residual { BRANCH } (a shortcut follows the branch after a bar); for text, "
     "embed V D [positions|nopositions] first, then layernorm, attention H [causal|bidirectional], gelu, tied_head; "
     "any other kind a layer plugin's (libmgtrain-layer-KIND.so); README: A model declared in the config"},
    {"model.objective", mgt::KeyType::choice, "next_token",
     "a language model's training objective: next_token (the label of each position is the token after it) or mlm "
     "(masked language model, BERT's: the last id of embed V D is the mask token, the files' tokens below it)",
     "next_token|mlm"},
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
      sequence_length_ = mgt::layer_list::sequence_length(entries, input_shape);
      for (auto& layer : layers) add(std::move(layer));
    } catch (const mgt::ConfigError& error) {
      throw mgt::ConfigError(key + error.what());
    }
  }

  int64_t sequence_length() const override { return sequence_length_; }

 private:
  int64_t sequence_length_ = 0;
};

}  // namespace

MGT_MODEL_PLUGIN("layers", "1.0.0", "a model declared in the config: model.layers lists its SDK layers", kKeys, Layers)
