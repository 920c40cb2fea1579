// Model plugin `mlp`: flatten, then Linear+ReLU for each hidden size, then a Linear to the classes.
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::integer_list, "256,128", "hidden layer sizes, comma-separated"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
    {"model.dropout", mgt::KeyType::non_negative_real, "0", "dropout probability after each hidden layer"},
};

class Mlp final : public mgt::SequentialModel {
 public:
  explicit Mlp(const mgt::ConfigSection& config) {
    int64_t in = config.get_size("inputs", mgt::kMaxModelSize);
    const double dropout = config.get_real("dropout");
    if (dropout >= 1.0)
      throw mgt::ConfigError("config key 'model.dropout': expected a probability in [0, 1), got " +
                             std::to_string(dropout));
    add(mgt::make_flatten("flatten"));
    int index = 1;
    for (int64_t width : config.get_size_list("hidden", mgt::kMaxModelSize)) {
      const std::string n = std::to_string(index++);
      add(mgt::make_linear("fc" + n, in, width));
      add(mgt::make_relu("relu" + n));
      if (dropout > 0) add(mgt::make_dropout("dropout" + n, static_cast<float>(dropout)));
      in = width;
    }
    add(mgt::make_linear("fc" + std::to_string(index), in, config.get_size("classes", mgt::kMaxModelSize),
                         mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("mlp", "1.0.0", "multi-layer perceptron: flatten, (Linear, ReLU) x hidden, Linear", kKeys, Mlp)
