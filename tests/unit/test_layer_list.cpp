// The `layers` model plugin's list grammar (plugins/models/layers/layer_list.hpp): lists that
// parse and build, with their layer names and shapes, and every error with its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/parameters.hpp"
#include "plugins/models/layers/layer_list.hpp"

namespace {

namespace list = mgt::layer_list;
using mgt::Shape;

std::vector<std::string> names_of(const std::vector<std::unique_ptr<mgt::Layer>>& layers) {
  std::vector<std::string> names;
  for (const auto& layer : layers) names.push_back(layer->name());
  return names;
}

Shape output_of(const std::vector<std::unique_ptr<mgt::Layer>>& layers, Shape shape) {
  for (const auto& layer : layers) shape = layer->output_shape(shape);
  return shape;
}

// The message of the ConfigError that parsing and building `text` for `sample` throws.
std::string error_of(const std::string& text, const Shape& sample = {1, 28, 28}) {
  try {
    list::build(list::parse(text), sample);
  } catch (const mgt::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LayerList, TheCnnAsAListHasTheCnnPluginsNames) {
  const auto layers = list::build(list::parse("conv 32 k3 p1, relu, maxpool 2, conv 64 k3 p1, relu, maxpool 2, "
                                              "flatten, linear 128, relu, linear 10"),
                                  {1, 28, 28});
  EXPECT_EQ(names_of(layers), (std::vector<std::string>{"conv1", "relu1", "pool1", "conv2", "relu2", "pool2",
                                                        "flatten1", "fc1", "relu3", "fc2"}));
  EXPECT_EQ(output_of(layers, {4, 1, 28, 28}), (Shape{4, 10}));
}

TEST(LayerList, ResidualBlocksOverSeveralLinesWithAShortcut) {
  const auto entries = list::parse(
      "conv 16 k3 p1, bn, relu,\n"
      "  residual { conv 32 k3 s2 p1, bn, relu, conv 32 k3 p1, bn | conv 32 k1 s2, bn },\n"
      "  relu, avgpool 2 s1, gap, dropout 0.5, linear 10");
  ASSERT_EQ(entries.size(), 9u);
  EXPECT_EQ(entries[3].kind, "residual");
  EXPECT_EQ(entries[3].text, "residual { conv 32 k3 s2 p1, bn, relu, conv 32 k3 p1, bn | conv 32 k1 s2, bn }");
  EXPECT_EQ(entries[3].branch.size(), 5u);
  EXPECT_EQ(entries[3].shortcut[1].position, "4.shortcut.2");
  const auto layers = list::build(entries, {3, 32, 32});
  EXPECT_EQ(names_of(layers), (std::vector<std::string>{"conv1", "bn1", "relu1", "res1", "relu2", "avgpool1", "gap1",
                                                        "dropout1", "fc1"}));
  EXPECT_EQ(output_of(layers, {2, 3, 32, 32}), (Shape{2, 10}));
  mgt::ParameterStore store;
  for (const auto& layer : layers) layer->declare(store);
  store.finalize();
  std::vector<std::string> params;
  for (const auto& info : store.params()) params.push_back(info.name);
  for (const char* name : {"conv1.weight", "bn1.weight", "res1.conv1.weight", "res1.bn2.bias",
                           "res1.shortcut.conv1.weight", "res1.shortcut.bn1.weight", "fc1.weight"})
    EXPECT_NE(std::find(params.begin(), params.end(), name), params.end()) << name;
}

TEST(LayerList, AFlatSampleTakesLinearLayers) {
  const auto layers = list::build(list::parse("linear 64,relu,linear 10"), {784});
  EXPECT_EQ(output_of(layers, {5, 784}), (Shape{5, 10}));
}

TEST(LayerList, EveryErrorNamesTheEntryExpectedAndActual) {
  EXPECT_EQ(error_of("conv 32 k3, relu, conv2d 64"),
            "entry 3 'conv2d 64': unknown layer 'conv2d'; expected one of conv, linear, maxpool, avgpool, gap, bn, "
            "relu, flatten, dropout, residual");
  EXPECT_EQ(error_of("conv 32"), "entry 1 'conv 32': missing argument kK, the kernel size (conv C kK [sS] [pP])");
  EXPECT_EQ(error_of("conv k3"),
            "entry 1 'conv k3': expected conv C kK [sS] [pP] with C output channels a positive integer, got 'k3'");
  EXPECT_EQ(error_of("conv 8 k3 x2"),
            "entry 1 'conv 8 k3 x2': bad argument 'x2': expected kK (kernel), sS (stride) or pP (padding), K and S "
            "positive");
  EXPECT_EQ(error_of("conv 8 k3 k5"), "entry 1 'conv 8 k3 k5': argument k given twice");
  EXPECT_EQ(error_of("gap, linear ten"),
            "entry 2 'linear ten': expected linear N with N output features a positive integer");
  EXPECT_EQ(error_of("maxpool 2 3"),
            "entry 1 'maxpool 2 3': expected maxpool K [sS] with K (window) and S (stride) positive integers");
  EXPECT_EQ(error_of("dropout 1.5"), "entry 1 'dropout 1.5': expected dropout P with P a probability in [0, 1)");
  EXPECT_EQ(error_of("relu 2"), "entry 1 'relu 2': relu takes no arguments, got '2'");
  EXPECT_EQ(error_of("conv 8 k3,, linear 10"),
            "entry 2 is empty (at character 11): expected a layer, one of conv, linear, maxpool, avgpool, gap, bn, "
            "relu, flatten, dropout, residual");
  EXPECT_EQ(error_of("linear 10,"),
            "entry 2 is empty (at the end): expected a layer, one of conv, linear, maxpool, "
            "avgpool, gap, bn, relu, flatten, dropout, residual");
  // Shapes: a layer that cannot take the previous one's output.
  EXPECT_EQ(error_of("gap, conv 8 k3"),
            "entry 2 'conv 8 k3' (conv1): expects an input [B, C, H, W], got [1, 1] (shapes for a batch of 1)");
  EXPECT_EQ(error_of("maxpool 2, maxpool 2, maxpool 2, maxpool 2, maxpool 2"),
            "entry 5 'maxpool 2' (pool5): layer 'pool5' expects input [B, C, H, W] with H, W >= 2, got [1, 1, 1, 1] "
            "(shapes for a batch of 1)");
  EXPECT_EQ(error_of("conv 8 k3, residual { relu, flatten }"),
            "entry 2 'residual { relu, flatten }' (res1): residual block 'res1': layer 'res1.flatten1' only reshapes "
            "its input, which a block that adds two paths of one shape cannot use");
  // A residual whose branches disagree: both shapes named.
  EXPECT_EQ(error_of("conv 8 k3 p1, residual { conv 16 k3 p1 }"),
            "entry 2 'residual { conv 16 k3 p1 }' (res1): residual block 'res1': for input [1, 8, 28, 28] the branch "
            "gives [1, 16, 28, 28] and the shortcut [1, 8, 28, 28]; they must agree to be added (a projection "
            "shortcut: a strided 1x1 convolution) (shapes for a batch of 1)");
  // Errors inside a residual name the entry's place in it.
  EXPECT_EQ(error_of("residual { relu, bogus }"),
            "entry 1.2 'bogus': unknown layer 'bogus'; expected one of conv, linear, maxpool, avgpool, gap, bn, relu, "
            "flatten, dropout, residual");
  EXPECT_EQ(error_of("residual { relu | gap, conv 8 k3 }"),
            "entry 1.shortcut.2 'conv 8 k3' (res1.shortcut.conv1): expects an input [B, C, H, W], got [1, 1] (shapes "
            "for a batch of 1)");
  // Unbalanced braces, and braces where they do not belong.
  EXPECT_EQ(error_of("conv 8 k3, residual { relu, relu"),
            "unbalanced braces: the '{' of entry 2 (residual, at character 21) is never closed");
  EXPECT_EQ(error_of("relu }, linear 10"), "unbalanced braces: '}' at character 6 closes no '{'");
  EXPECT_EQ(error_of("residual relu"),
            "entry 1 'residual relu': expected residual { BRANCH } or residual { BRANCH | SHORTCUT }");
  EXPECT_EQ(error_of("conv 8 k3 { relu }"), "entry 1 'conv 8 k3': '{' at character 11 follows only residual");
  EXPECT_EQ(error_of("relu | relu"), "'|' at character 6 is outside any residual { BRANCH | SHORTCUT }");
}

}  // namespace
