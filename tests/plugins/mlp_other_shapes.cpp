// A model named `mlp` with the shipped plugin's version and keys but other layer shapes (one
// hidden layer of 100): a rank that loads it, as a stale build on one node would, must be refused
// at start-up because the parameter shapes differ.
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::integer_list, "256,128", "ignored: one hidden layer of 100"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
    {"model.dropout", mgt::KeyType::non_negative_real, "0", "ignored"},
};

class NarrowMlp final : public mgt::SequentialModel {
 public:
  explicit NarrowMlp(const mgt::ConfigSection& config) {
    add(mgt::make_flatten("flatten"));
    add(mgt::make_linear("fc1", config.get_int("inputs"), 100));
    add(mgt::make_relu("relu1"));
    add(mgt::make_linear("fc2", 100, config.get_int("classes"), mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("mlp", "1.0.0", "test: an mlp with other shapes", kKeys, NarrowMlp)
