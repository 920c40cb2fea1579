#pragma once
// The `layers` model's list of layers, as written in model.layers: parsed into entries, then built
// into SDK layers for an input shape, each entry checked against the shape the one before gives.
// Every error is a ConfigError naming the entry (its position and text), expected versus actual.
//
//   list  := entry ("," entry)*
//   entry := KIND ARG* | "residual" "{" list ["|" list] "}"
//
// Kinds, with their arguments (C, N, K, S, P, V, D, H integers; the input channels and features
// are taken from the shape the previous entry gives): conv C kK [sS] [pP], linear N, maxpool K [sS],
// avgpool K [sS] (S defaults to K), gap, bn, relu, flatten, dropout P, and residual { BRANCH }
// or residual { BRANCH | SHORTCUT } (an empty shortcut is the identity). A language model starts
// with embed V D [positions|nopositions] (token ids [B, T] -> [B, T, D], T the sample shape's one
// integer: the token's row plus a learned position's row, or with nopositions the token's row
// alone, no embed1.position parameter) and may then use layernorm, gelu, attention H
// [causal|bidirectional] (on [B, T, 3 x dim] from a linear before it) and tied_head (logits over
// the embed's table); there linear N acts on each token. Any other kind is a layer plugin's
// (libmgtrain-layer-<kind>.so in the plugin path, mgtrain/layer_plugin.hpp), which takes the
// entry's arguments and input shape.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/layers.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt::layer_list {

struct Entry {
  std::string kind;                     // "conv", "residual", ...
  std::vector<std::string> args;        // the words after the kind
  std::string text;                     // as written (whitespace collapsed), for messages
  std::string position;                 // "3"; in a residual at 5: "5.2", its shortcut's "5.shortcut.1"
  std::vector<Entry> branch, shortcut;  // residual only
};

// Parses a list; throws ConfigError on unbalanced braces, an empty entry, an unknown kind or a
// missing, extra or bad argument.
std::vector<Entry> parse(const std::string& text);

// Builds the layers for samples of `sample_shape` (no batch dimension: C,H,W, features, or T
// token ids when the list starts with embed). Layer names are <name><index>, the index counting
// that kind within its list from 1: conv1, bn1, fc1 (linear), pool1 (maxpool), avgpool1, gap1,
// relu1, flatten1, dropout1, res1, embed1, ln1 (layernorm), attn1 (attention), gelu1, head1
// (tied_head); inside a residual prefixed by its name (res1.conv1), its shortcut's by
// "<name>.shortcut." (res1.shortcut.conv1).
// A linear entry that ends the list (the classifier) is initialised fan-in uniform, as PyTorch's
// nn.Linear and the built-in models' last layer; any other, He-uniform; a linear on tokens, as the
// gpt model's, N(0, 0.02^2).
// The last entry must give logits: [B, classes], or for a list that starts with embed V D, [B, T, V].
// Throws ConfigError naming the entry when it cannot take the previous entry's output.
std::vector<std::unique_ptr<Layer>> build(const std::vector<Entry>& entries, const Shape& sample_shape);

// The window of a list that starts with embed (Model::sequence_length): the sample shape's T; 0
// for any other list, which reads samples.
int64_t sequence_length(const std::vector<Entry>& entries, const Shape& sample_shape);

}  // namespace mgt::layer_list
