// Model plugin `swish_mlp`: an MLP whose hidden activation is a layer of the plugin's own, Swish
// (SiLU, y = x * sigmoid(x): an activation gated by its own input), written once over mgt::Ops.
// Nothing here is CUDA: the same code runs on the CPU path, in deterministic mode and, in an
// mgtrain built with CUDA, on the GPU path (train.device = gpu).
#include <string>

#include "mgtrain/layers.hpp"
#include "mgtrain/plugin.hpp"
#include "swish.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::integer_list, "256,128", "hidden layer sizes, comma-separated"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
};

class SwishMlp final : public mgt::SequentialModel {
 public:
  explicit SwishMlp(const mgt::ConfigSection& config) {
    int64_t in = config.get_int("inputs");
    add(mgt::make_flatten("flatten"));
    int index = 1;
    for (int64_t width : config.get_int_list("hidden")) {
      if (width <= 0)
        throw mgt::ConfigError("config key 'model.hidden': sizes must be positive, got " + std::to_string(width));
      const std::string n = std::to_string(index++);
      add(mgt::make_linear("fc" + n, in, width));
      add(std::make_unique<SwishLayer>("swish" + n));
      in = width;
    }
    add(mgt::make_linear("fc" + std::to_string(index), in, config.get_int("classes"), mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("swish_mlp", "1.0.0", "MLP with a Swish activation of its own, written once over mgt::Ops", kKeys,
                 SwishMlp)
