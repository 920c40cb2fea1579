// Model plugin `cnn`: two (Conv, ReLU, MaxPool) blocks, then two fully connected layers.
#include <algorithm>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.input_shape", mgt::KeyType::integer_list, "1,28,28", "sample shape C,H,W (taken from data.train if unset)"},
    {"model.channels", mgt::KeyType::integer_list, "32,64", "output channels of the two convolutions"},
    {"model.kernel", mgt::KeyType::positive_integer, "3", "convolution kernel size"},
    {"model.hidden", mgt::KeyType::positive_integer, "128", "width of the first fully connected layer"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
    {"model.dropout", mgt::KeyType::non_negative_real, "0", "dropout probability before the last layer"},
    {"model.global_pool", mgt::KeyType::boolean, "false",
     "average each channel over its plane (global average pooling) instead of flattening before fc1"},
};

class Cnn final : public mgt::SequentialModel {
 public:
  explicit Cnn(const mgt::ConfigSection& config) {
    const auto input = config.get_size_list("input_shape", mgt::kMaxModelSize);
    const auto channels = config.get_size_list("channels", mgt::kMaxModelSize);
    if (input.size() != 3)
      throw mgt::ConfigError("config key 'model.input_shape': expected C,H,W (3 values), got " +
                             std::to_string(input.size()) + " values");
    if (channels.size() != 2)
      throw mgt::ConfigError("config key 'model.channels': expected 2 values, got " + std::to_string(channels.size()));
    // A kernel wider than the image would see nothing but padding.
    const int64_t k = config.get_size("kernel", std::min(input[1], input[2]));
    const int64_t hidden = config.get_size("hidden", mgt::kMaxModelSize);
    const int64_t classes = config.get_size("classes", mgt::kMaxModelSize);
    const double dropout = config.get_real("dropout");
    if (dropout >= 1.0)
      throw mgt::ConfigError("config key 'model.dropout': expected a probability in [0, 1), got " +
                             std::to_string(dropout));
    // "Same" padding for odd kernels, then 2x2 pooling halves H and W in each block.
    const int64_t pad = k / 2;
    add(mgt::make_conv2d("conv1", input[0], channels[0], k, 1, pad));
    add(mgt::make_relu("relu1"));
    add(mgt::make_max_pool2d("pool1", 2, 2));
    add(mgt::make_conv2d("conv2", channels[0], channels[1], k, 1, pad));
    add(mgt::make_relu("relu2"));
    add(mgt::make_max_pool2d("pool2", 2, 2));
    const int64_t h = (input[1] + 2 * pad - k + 1) / 2, w = (input[2] + 2 * pad - k + 1) / 2;
    const int64_t h2 = (h + 2 * pad - k + 1) / 2, w2 = (w + 2 * pad - k + 1) / 2;
    if (config.get_bool("global_pool")) {
      add(mgt::make_global_avg_pool2d("gap"));
      add(mgt::make_linear("fc1", channels[1], hidden));
    } else {
      add(mgt::make_flatten("flatten"));
      add(mgt::make_linear("fc1", channels[1] * h2 * w2, hidden));
    }
    add(mgt::make_relu("relu3"));
    if (dropout > 0) add(mgt::make_dropout("dropout", static_cast<float>(dropout)));
    add(mgt::make_linear("fc2", hidden, classes, mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("cnn", "1.0.0", "2 x (Conv, ReLU, MaxPool 2x2), Linear, ReLU, Linear", kKeys, Cnn)
