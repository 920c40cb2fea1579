// Model plugin `resnet`: the CIFAR-style residual network of He et al. (2016, section 4.2): a 3x3
// convolution, three stages of n residual blocks at widths w, 2w and 4w (the second and third
// starting with stride 2 and a projection shortcut: a strided 1x1 convolution with batch norm),
// global average pooling and a linear classifier; depth = 6n + 2 (20, 32, 44, 56, 110). Each block
// is conv3x3, bn, relu, conv3x3, bn, added to its shortcut, then relu. Parameter names follow
// torchvision's ResNet ("layer2.0.conv1.weight", "layer2.0.shortcut.1.running_mean").
#include <string>
#include <utility>
#include <vector>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.input_shape", mgt::KeyType::integer_list, "1,28,28", "sample shape C,H,W (taken from data.train if unset)"},
    {"model.depth", mgt::KeyType::positive_integer, "20", "layers with weights: 6n + 2 for n blocks a stage"},
    {"model.width", mgt::KeyType::positive_integer, "16", "channels of the first stage (then 2x and 4x)"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
};

class ResNet final : public mgt::SequentialModel {
 public:
  explicit ResNet(const mgt::ConfigSection& config) {
    const auto input = config.get_size_list("input_shape", mgt::kMaxModelSize);
    if (input.size() != 3)
      throw mgt::ConfigError("config key 'model.input_shape': expected C,H,W (3 values), got " +
                             std::to_string(input.size()) + " values");
    const int64_t depth = config.get_size("depth", 6 * 1000 + 2);
    if (depth < 8 || (depth - 2) % 6 != 0)
      throw mgt::ConfigError(
          "config key 'model.depth': expected 6n + 2 with n >= 1 (8, 14, 20, 32, 44, 56, 110), got " +
          std::to_string(depth));
    // The last stage is 4 x width wide.
    const int64_t blocks = (depth - 2) / 6, width = config.get_size("width", mgt::kMaxModelSize / 4);
    add(mgt::make_conv2d("conv1", input[0], width, 3, 1, 1));
    add(mgt::make_batch_norm2d("bn1", width));
    add(mgt::make_relu("relu1"));
    int64_t channels = width;
    for (int stage = 1; stage <= 3; ++stage) {
      const int64_t out = width << (stage - 1);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t stride = stage > 1 && b == 0 ? 2 : 1;
        add_block("layer" + std::to_string(stage) + "." + std::to_string(b), channels, out, stride);
        channels = out;
      }
    }
    add(mgt::make_global_avg_pool2d("avgpool"));
    add(mgt::make_linear("fc", channels, config.get_size("classes", mgt::kMaxModelSize), mgt::Init::fan_in_uniform));
  }

 private:
  void add_block(const std::string& name, int64_t in, int64_t out, int64_t stride) {
    std::vector<std::unique_ptr<mgt::Layer>> branch, shortcut;
    branch.push_back(mgt::make_conv2d(name + ".conv1", in, out, 3, stride, 1));
    branch.push_back(mgt::make_batch_norm2d(name + ".bn1", out));
    branch.push_back(mgt::make_relu(name + ".relu1"));
    branch.push_back(mgt::make_conv2d(name + ".conv2", out, out, 3, 1, 1));
    branch.push_back(mgt::make_batch_norm2d(name + ".bn2", out));
    if (stride != 1 || in != out) {
      shortcut.push_back(mgt::make_conv2d(name + ".shortcut.0", in, out, 1, stride, 0));
      shortcut.push_back(mgt::make_batch_norm2d(name + ".shortcut.1", out));
    }
    add(mgt::make_residual(name, std::move(branch), std::move(shortcut)));
    add(mgt::make_relu(name + ".relu"));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("resnet", "1.0.0", "CIFAR-style ResNet (He et al.): depth 6n+2, 3 stages, batch norm", kKeys, ResNet)
