// The `layers` model plugin's list grammar (plugins/models/layers/layer_list.hpp): lists that
// parse and build, with their layer names and shapes, and every error with its message; and a GPT
// declared as a list against the gpt model plugin, both loaded from the build tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "loader/plugin_loader.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/model.hpp"
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

std::vector<std::string> param_names(const std::vector<std::unique_ptr<mgt::Layer>>& layers) {
  mgt::ParameterStore store;
  for (const auto& layer : layers) layer->declare(store);
  store.finalize();
  std::vector<std::string> names;
  for (const auto& info : store.params()) names.push_back(info.name + " " + mgt::shape_string(info.shape));
  return names;
}

// The causal attribute of an attention layer, as `mgtrain export` sees it; -1 for another layer.
int64_t causal_of(const mgt::LayerDescription& layer) {
  if (layer.kind != mgt::LayerKind::attention) return -1;
  for (const auto& [key, value] : layer.ints)
    if (key == "causal") return value;
  return -1;
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
            "relu, flatten, dropout, residual, embed, layernorm, attention, gelu, tied_head, or a layer plugin of that "
            "name (libmgtrain-layer-conv2d.so in the plugin path)");
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
            "relu, flatten, dropout, residual, embed, layernorm, attention, gelu, tied_head");
  EXPECT_EQ(error_of("linear 10,"),
            "entry 2 is empty (at the end): expected a layer, one of conv, linear, maxpool, "
            "avgpool, gap, bn, relu, flatten, dropout, residual, embed, layernorm, attention, gelu, tied_head");
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
            "flatten, dropout, residual, embed, layernorm, attention, gelu, tied_head, or a layer plugin of that name "
            "(libmgtrain-layer-bogus.so in the plugin path)");
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
  // The last entry must give logits.
  EXPECT_EQ(error_of("conv 8 k3, relu"),
            "the last entry 'relu' gives [1, 8, 26, 26] for a batch of 1; expected logits [B, classes]: end with "
            "linear N");
}

// The GPT of the gpt model plugin, 2 blocks of width 128 over windows of 128 byte tokens; the
// second block's attention without a mask word, which is causal too.
const char* const kGptList =
    "embed 256 128,"
    " residual { layernorm, linear 384, attention 4 causal, linear 128 },"
    " residual { layernorm, linear 512, gelu, linear 128 },"
    " residual { layernorm, linear 384, attention 4, linear 128 },"
    " residual { layernorm, linear 512, gelu, linear 128 },"
    " layernorm, tied_head";

TEST(LayerList, AGptAsAListReadsTokenWindowsAndGivesLogitsPerToken) {
  const auto entries = list::parse(kGptList);
  EXPECT_EQ(list::sequence_length(entries, {128}), 128);
  const auto layers = list::build(entries, {128});
  EXPECT_EQ(names_of(layers), (std::vector<std::string>{"embed1", "res1", "res2", "res3", "res4", "ln1", "head1"}));
  EXPECT_EQ(output_of(layers, {3, 128}), (Shape{3, 128, 256}));
  // Shorter windows too (the test file's last, generation's prompt).
  EXPECT_EQ(output_of(layers, {1, 5}), (Shape{1, 5, 256}));
  const auto params = param_names(layers);
  EXPECT_EQ(params.size(), 2u + 4u * 6u + 2u);
  for (const char* name : {"embed1.weight [256, 128]", "embed1.position [128, 128]", "res1.ln1.weight [128]",
                           "res1.fc1.weight [384, 128]", "res1.fc2.weight [128, 128]", "res2.fc1.weight [512, 128]",
                           "res2.fc2.bias [128]", "res4.fc2.weight [128, 512]", "ln1.bias [128]"})
    EXPECT_NE(std::find(params.begin(), params.end(), name), params.end()) << name;
  // attention is causal unless written bidirectional.
  EXPECT_EQ(entries[1].branch[2].text, "attention 4 causal");
  EXPECT_EQ(entries[3].branch[2].text, "attention 4");
  EXPECT_EQ(causal_of(layers[1]->describe().branch[2]->describe()), 1);
  EXPECT_EQ(causal_of(layers[3]->describe().branch[2]->describe()), 1);
  // An image list reads samples.
  EXPECT_EQ(list::sequence_length(list::parse("flatten, linear 10"), {1, 28, 28}), 0);
  EXPECT_EQ(list::sequence_length(list::parse("linear 10"), {784}), 0);
}

TEST(LayerList, AnUntiedHeadIsALinearOnEachToken) {
  const auto layers = list::build(
      list::parse("embed 32 16, dropout 0.1, linear 48, attention 2 bidirectional, gelu, layernorm, linear 32"), {8});
  EXPECT_EQ(names_of(layers), (std::vector<std::string>{"embed1", "dropout1", "fc1", "attn1", "gelu1", "ln1", "fc2"}));
  EXPECT_EQ(causal_of(layers[3]->describe()), 0);
  EXPECT_EQ(output_of(layers, {2, 8}), (Shape{2, 8, 32}));
  EXPECT_EQ(param_names(layers), (std::vector<std::string>{"embed1.weight [32, 16]", "embed1.position [8, 16]",
                                                           "fc1.weight [48, 16]", "fc1.bias [48]", "ln1.weight [16]",
                                                           "ln1.bias [16]", "fc2.weight [32, 16]", "fc2.bias [32]"}));
  // Without embed, a linear still flattens its input, and layernorm normalises features.
  EXPECT_EQ(output_of(list::build(list::parse("linear 64, layernorm, gelu, linear 10"), {4, 8}), {2, 4, 8}),
            (Shape{2, 10}));
}

TEST(LayerList, AnEmbedWithoutPositionsHasTheTableAloneAndTheTiedHeadReadsIt) {
  const auto entries = list::parse(
      "embed 32 16 nopositions, residual { layernorm, linear 48, attention 2 causal, linear 16 }, layernorm, "
      "tied_head");
  EXPECT_EQ(list::sequence_length(entries, {8}), 8);
  const auto layers = list::build(entries, {8});
  EXPECT_EQ(names_of(layers), (std::vector<std::string>{"embed1", "res1", "ln1", "head1"}));
  EXPECT_EQ(output_of(layers, {2, 8}), (Shape{2, 8, 32}));
  const auto params = param_names(layers);
  EXPECT_EQ(params.front(), "embed1.weight [32, 16]");
  for (const auto& name : params) EXPECT_EQ(name.find("position"), std::string::npos) << name;
  EXPECT_EQ(layers.front()->describe().params.size(), 1u);
  // The default, and the word for it, keep the position table.
  for (const char* embed : {"embed 32 16", "embed 32 16 positions"}) {
    const auto with = param_names(list::build(list::parse(std::string(embed) + ", layernorm, tied_head"), {8}));
    EXPECT_EQ(with, (std::vector<std::string>{"embed1.weight [32, 16]", "embed1.position [8, 16]", "ln1.weight [16]",
                                              "ln1.bias [16]"}))
        << embed;
  }
}

TEST(LayerList, TokenEntriesNameTheEntryExpectedAndActual) {
  // Arguments.
  EXPECT_EQ(error_of("embed 256", {8}),
            "entry 1 'embed 256': expected embed V D [positions|nopositions] with V (vocabulary) and D (width) "
            "positive integers");
  EXPECT_EQ(error_of("embed 256 0", {8}),
            "entry 1 'embed 256 0': expected embed V D [positions|nopositions] with V (vocabulary) and D (width) "
            "positive integers");
  EXPECT_EQ(error_of("embed 256 8 positions=none", {8}),
            "entry 1 'embed 256 8 positions=none': expected embed V D [positions|nopositions] with V (vocabulary) "
            "and D (width) positive integers");
  EXPECT_EQ(error_of("embed 256 8 nopositions causal", {8}),
            "entry 1 'embed 256 8 nopositions causal': expected embed V D [positions|nopositions] with V "
            "(vocabulary) and D (width) positive integers");
  EXPECT_EQ(error_of("embed 16 8, linear 24, attention", {8}),
            "entry 3 'attention': expected attention H [causal|bidirectional] with H (heads) a positive integer");
  EXPECT_EQ(error_of("embed 16 8, linear 24, attention 2 masked", {8}),
            "entry 3 'attention 2 masked': expected attention H [causal|bidirectional] with H (heads) a positive "
            "integer");
  EXPECT_EQ(error_of("embed 16 8, tied_head 16", {8}),
            "entry 2 'tied_head 16': tied_head takes no arguments, got '16'");
  EXPECT_EQ(error_of("embed 16 8, layernorm 8", {8}), "entry 2 'layernorm 8': layernorm takes no arguments, got '8'");
  // embed: first, and on token ids.
  EXPECT_EQ(error_of("embed 256 128, layernorm, tied_head"),
            "entry 1 'embed 256 128' (embed1): expects token ids [B, T], model.input_shape = T (one integer: the "
            "window's length); got [1, 1, 28, 28] (shapes for a batch of 1)");
  EXPECT_EQ(error_of("linear 8, embed 16 8", {8}),
            "entry 2 'embed 16 8' (embed1): embed takes the token ids, so it must be the list's first entry, not "
            "entry 2");
  EXPECT_EQ(error_of("embed 16 8, residual { embed 16 8 }, tied_head", {8}),
            "entry 2.1 'embed 16 8' (res1.embed1): embed takes the token ids, so it must be the list's first entry, "
            "not entry 2.1");
  // attention: on a linear's queries, keys and values, the heads dividing their width.
  EXPECT_EQ(error_of("embed 16 8, attention 2, linear 16", {8}),
            "entry 2 'attention 2' (attn1): expects queries, keys and values [B, T, 3 x dim] (a linear of 3 x dim "
            "before it), got [1, 8, 8]: 8 is not a multiple of 3 (shapes for a batch of 1)");
  EXPECT_EQ(error_of("embed 16 8, linear 30, attention 4, linear 16", {8}),
            "entry 3 'attention 4' (attn1): 4 heads do not divide dim = 10 (the input's width 30 / 3); expected a "
            "divisor of it (a head's width is dim / heads)");
  EXPECT_EQ(error_of("linear 48, attention 2, linear 10", {8}),
            "entry 2 'attention 2' (attn1): expects token activations [B, T, 3 x dim] after an embed entry, got "
            "[1, 48] (shapes for a batch of 1)");
  // tied_head: after an embed, on its width, once.
  EXPECT_EQ(error_of("linear 16, tied_head", {8}),
            "entry 2 'tied_head' (head1): uses the table of an embed entry, and no embed entry comes before it");
  EXPECT_EQ(error_of("embed 16 8, linear 12, tied_head", {8}),
            "entry 3 'tied_head' (head1): expects [B, T, 8], the width of entry 1 'embed 16 8', got [1, 8, 12] "
            "(shapes for a batch of 1)");
  EXPECT_EQ(error_of("embed 16 16, tied_head, tied_head", {8}),
            "entry 3 'tied_head' (head2): the table of entry 1 'embed 16 16' is already tied to head1; it ties one "
            "head");
  // layernorm: not over an image's rows.
  EXPECT_EQ(error_of("conv 8 k3, layernorm, flatten, linear 10"),
            "entry 2 'layernorm' (ln1): normalises the last dimension of [B, features] or [B, T, features], got "
            "[1, 8, 26, 26] (shapes for a batch of 1)");
  // A window longer than the embedding's positions cannot arise: T is taken from the sample shape.
  // The logits of a token list: per token, over the embed's vocabulary.
  EXPECT_EQ(error_of("embed 256 128, layernorm", {64}),
            "the last entry 'layernorm' gives [1, 64, 128] for a batch of 1; expected logits [B, T, 256], over the "
            "vocabulary of entry 1 'embed 256 128': end with tied_head or linear 256");
  EXPECT_EQ(error_of("embed 256 128, flatten, linear 256", {64}),
            "the last entry 'linear 256' gives [1, 256] for a batch of 1; expected logits [B, T, 256], over the "
            "vocabulary of entry 1 'embed 256 128': end with tied_head or linear 256");
}

// A model made by the plugin `name` from the [model] lines `keys`, with the registry's defaults.
std::unique_ptr<mgt::Model> create_model(mgt::PluginRegistry& registry, const std::string& name,
                                         const std::string& keys) {
  mgt::Config config = mgt::Config::from_string("[model]\nname = " + name + "\n" + keys, "test");
  auto known = registry.config_keys("model", name);
  known.push_back({"model.name", mgt::KeyType::string, nullptr, "model"});
  config.validate(known);
  return registry.create_model(name, config);
}

// The GPT declared as a list computes what the gpt plugin computes: with the same parameters (the
// names differ, and so their initial values, which the name seeds), the same logits and the same
// gradients, bit for bit, through attention, the residual blocks and the tied head.
TEST(LayerList, AGptAsAListComputesWhatTheGptPluginComputes) {
  mgt::PluginRegistry registry;
  auto gpt = create_model(registry, "gpt", "layers = 2\nheads = 2\ndim = 16\ncontext = 8\nvocab = 32\n");
  auto declared = create_model(registry, "layers",
                               "input_shape = 8\nlayers = embed 32 16, "
                               "residual { layernorm, linear 48, attention 2 causal, linear 16 }, "
                               "residual { layernorm, linear 64, gelu, linear 16 }, "
                               "residual { layernorm, linear 48, attention 2 causal, linear 16 }, "
                               "residual { layernorm, linear 64, gelu, linear 16 }, layernorm, tied_head\n");
  EXPECT_EQ(declared->sequence_length(), gpt->sequence_length());
  mgt::ParameterStore gpt_store, declared_store;
  gpt->declare(gpt_store);
  declared->declare(declared_store);
  gpt_store.finalize();
  declared_store.finalize();
  ASSERT_EQ(declared_store.params().size(), gpt_store.params().size());
  for (size_t i = 0; i < gpt_store.params().size(); ++i)
    ASSERT_EQ(declared_store.params()[i].shape, gpt_store.params()[i].shape)
        << declared_store.params()[i].name << " against " << gpt_store.params()[i].name;
  EXPECT_EQ(declared_store.params()[2].name, "res1.ln1.weight");
  EXPECT_EQ(gpt_store.params()[2].name, "h0.ln1.weight");
  ASSERT_EQ(declared_store.flat_size(), gpt_store.flat_size());
  gpt_store.initialize(5);
  std::memcpy(declared_store.params_data(), gpt_store.params_data(), gpt_store.flat_size() * sizeof(float));

  mgt::Tensor tokens({3, 8});
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data()[i] = static_cast<float>((i * 7 + 3) % 32);
  mgt::StepContext ctx;
  const mgt::Tensor& gpt_logits = gpt->forward(tokens, ctx);
  const mgt::Tensor& declared_logits = declared->forward(tokens, ctx);
  ASSERT_EQ(declared_logits.shape(), (Shape{3, 8, 32}));
  ASSERT_EQ(gpt_logits.shape(), declared_logits.shape());
  EXPECT_EQ(std::memcmp(gpt_logits.data(), declared_logits.data(), gpt_logits.numel() * sizeof(float)), 0);

  mgt::Tensor grad_logits({3, 8, 32});
  for (int64_t i = 0; i < grad_logits.numel(); ++i) grad_logits.data()[i] = static_cast<float>(i % 11) * 0.01f - 0.05f;
  gpt_store.zero_grads();
  declared_store.zero_grads();
  gpt->backward(grad_logits, ctx, [](const std::vector<mgt::ParamHandle>&) {});
  declared->backward(grad_logits, ctx, [](const std::vector<mgt::ParamHandle>&) {});
  for (size_t i = 0; i < gpt_store.params().size(); ++i) {
    const auto& info = gpt_store.params()[i];
    EXPECT_EQ(std::memcmp(gpt_store.grad(i), declared_store.grad(i), mgt::shape_numel(info.shape) * sizeof(float)), 0)
        << "the gradient of " << declared_store.params()[i].name << " against " << info.name;
  }
}

}  // namespace
