// The `layers` model's grammar and builder (layer_list.hpp).
#include "layer_list.hpp"

#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "mgtrain/error.hpp"
#include "mgtrain/layer_plugin.hpp"

namespace mgt::layer_list {
namespace {

const char* const kKinds =
    "conv, linear, maxpool, avgpool, gap, bn, relu, flatten, dropout, residual, embed, layernorm, attention, gelu, "
    "tied_head";

struct Token {
  std::string text;  // a word, or one of , { } |
  size_t column;     // 1-based character in the list
};

std::vector<Token> tokenize(const std::string& text) {
  std::vector<Token> tokens;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == ',' || c == '{' || c == '}' || c == '|') {
      tokens.push_back({std::string(1, c), i + 1});
      ++i;
    } else {
      const size_t start = i;
      while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i])) &&
             std::string(",{}|").find(text[i]) == std::string::npos)
        ++i;
      tokens.push_back({text.substr(start, i - start), start + 1});
    }
  }
  return tokens;
}

std::string quoted(const Entry& e) { return "entry " + e.position + " '" + e.text + "'"; }

// A whole word that is an integer, or nothing.
bool to_integer(const std::string& word, int64_t& value) {
  if (word.empty() || word.size() > 18) return false;
  for (char c : word)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  value = std::stoll(word);
  return true;
}

class Parser {
 public:
  explicit Parser(const std::string& text) : tokens_(tokenize(text)) {}

  std::vector<Entry> parse_all() {
    auto entries = parse_list("");
    if (at_end()) return entries;
    const Token& t = tokens_[next_];
    if (t.text == "}")
      throw ConfigError("unbalanced braces: '}' at character " + std::to_string(t.column) + " closes no '{'");
    throw ConfigError("'|' at character " + std::to_string(t.column) +
                      " is outside any residual { BRANCH | SHORTCUT }");
  }

 private:
  bool at_end() const { return next_ >= tokens_.size(); }
  bool at(const char* text) const { return !at_end() && tokens_[next_].text == text; }

  // Entries up to the end, a '}' or a '|' (left for the caller); `prefix` numbers them ("5.").
  std::vector<Entry> parse_list(const std::string& prefix) {
    std::vector<Entry> entries;
    while (true) {
      const std::string position = prefix + std::to_string(entries.size() + 1);
      if (at_end() || at(",") || at("}") || at("|")) {
        const std::string where = at_end() ? "at the end" : "at character " + std::to_string(tokens_[next_].column);
        throw ConfigError("entry " + position + " is empty (" + where + "): expected a layer, one of " + kKinds);
      }
      entries.push_back(parse_entry(position));
      if (!at(",")) return entries;
      ++next_;
    }
  }

  Entry parse_entry(const std::string& position) {
    Entry e;
    e.position = position;
    e.kind = tokens_[next_++].text;
    e.text = e.kind;
    if (e.kind == "{") throw ConfigError("entry " + position + " starts with '{': a block is written residual { ... }");
    while (!at_end() && !at(",") && !at("}") && !at("|") && !at("{")) {
      e.args.push_back(tokens_[next_++].text);
      e.text += " " + e.args.back();
    }
    if (e.kind != "residual") {
      if (at("{"))
        throw ConfigError(quoted(e) + ": '{' at character " + std::to_string(tokens_[next_].column) +
                          " follows only residual");
      check_arguments(e);
      return e;
    }
    if (!e.args.empty() || !at("{"))
      throw ConfigError(quoted(e) + ": expected residual { BRANCH } or residual { BRANCH | SHORTCUT }");
    const size_t first = next_ - 1, open = tokens_[next_++].column;
    e.branch = parse_list(position + ".");
    if (at("|")) {
      ++next_;
      e.shortcut = parse_list(position + ".shortcut.");
    }
    if (!at("}"))
      throw ConfigError("unbalanced braces: the '{' of entry " + position + " (residual, at character " +
                        std::to_string(open) + ") is never closed");
    ++next_;
    e.text.clear();
    for (size_t i = first; i < next_; ++i)
      e.text += (i == first || tokens_[i].text == "," ? "" : " ") + tokens_[i].text;
    return e;
  }

  static void check_arguments(const Entry& e) {
    const auto bad = [&](const std::string& what) { throw ConfigError(quoted(e) + ": " + what); };
    const auto& a = e.args;
    int64_t value = 0;
    if (e.kind == "conv") {
      if (a.empty() || !to_integer(a[0], value) || value <= 0)
        bad("expected conv C kK [sS] [pP] with C output channels a positive integer, got '" +
            (a.empty() ? std::string() : a[0]) + "'");
      std::set<char> seen;
      for (size_t i = 1; i < a.size(); ++i) {
        const char key = a[i][0];
        if (std::string("ksp").find(key) == std::string::npos || !to_integer(a[i].substr(1), value) ||
            (key != 'p' && value <= 0))
          bad("bad argument '" + a[i] + "': expected kK (kernel), sS (stride) or pP (padding), K and S positive");
        if (!seen.insert(key).second) bad("argument " + std::string(1, key) + " given twice");
      }
      if (!seen.count('k')) bad("missing argument kK, the kernel size (conv C kK [sS] [pP])");
    } else if (e.kind == "linear") {
      if (a.size() != 1 || !to_integer(a[0], value) || value <= 0)
        bad("expected linear N with N output features a positive integer");
    } else if (e.kind == "maxpool" || e.kind == "avgpool") {
      bool ok = !a.empty() && a.size() <= 2 && to_integer(a[0], value) && value > 0;
      if (ok && a.size() == 2) ok = a[1][0] == 's' && to_integer(a[1].substr(1), value) && value > 0;
      if (!ok) bad("expected " + e.kind + " K [sS] with K (window) and S (stride) positive integers");
    } else if (e.kind == "dropout") {
      char* end = nullptr;
      const double p = a.size() == 1 ? std::strtod(a[0].c_str(), &end) : -1.0;
      if (a.size() != 1 || *end != '\0' || !(p >= 0.0 && p < 1.0))
        bad("expected dropout P with P a probability in [0, 1)");
    } else if (e.kind == "embed") {
      int64_t width = 0;
      if (a.size() < 2 || a.size() > 3 || !to_integer(a[0], value) || value <= 0 || !to_integer(a[1], width) ||
          width <= 0 || (a.size() == 3 && a[2] != "positions" && a[2] != "nopositions"))
        bad("expected embed V D [positions|nopositions] with V (vocabulary) and D (width) positive integers");
    } else if (e.kind == "attention") {
      if (a.empty() || a.size() > 2 || !to_integer(a[0], value) || value <= 0 ||
          (a.size() == 2 && a[1] != "causal" && a[1] != "bidirectional"))
        bad("expected attention H [causal|bidirectional] with H (heads) a positive integer");
    } else if (e.kind == "gap" || e.kind == "bn" || e.kind == "relu" || e.kind == "flatten" || e.kind == "layernorm" ||
               e.kind == "gelu" || e.kind == "tied_head") {
      if (!a.empty()) bad(e.kind + " takes no arguments, got '" + a[0] + "'");
    } else if (!find_layer_plugin(e.kind)) {
      throw ConfigError("entry " + e.position + " '" + e.text + "': unknown layer '" + e.kind + "'; expected one of " +
                        kKinds + ", or a layer plugin of that name (libmgtrain-layer-" + e.kind +
                        ".so in the plugin path)");
    }
  }

  std::vector<Token> tokens_;
  size_t next_ = 0;
};

int64_t integer_after(const std::vector<std::string>& args, char key, int64_t fallback) {
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i][0] == key) return std::stoll(args[i].substr(1));
  return fallback;
}

// The name prefix of each kind's layers.
std::string base_name(const std::string& kind) {
  static const std::map<std::string, std::string> names = {{"linear", "fc"},      {"maxpool", "pool"},
                                                           {"residual", "res"},   {"layernorm", "ln"},
                                                           {"attention", "attn"}, {"tied_head", "head"}};
  const auto it = names.find(kind);
  return it == names.end() ? kind : it->second;
}

bool contains_kind(const std::vector<Entry>& entries, const std::string& kind) {
  for (const Entry& e : entries)
    if (e.kind == kind || contains_kind(e.branch, kind) || contains_kind(e.shortcut, kind)) return true;
  return false;
}

// What the layers after an embed entry need of it: a token model's activations are [B, T, features].
struct Tokens {
  const Entry* embed = nullptr;  // null: the list reads samples, not tokens
  std::string embed_name;
  int64_t vocab = 0, dim = 0;
  bool table_shared = false;  // a tied_head in the list uses the embed's table
  std::string head_name;      // the tied head built, if any
};

// Builds `entries` onto `layers` from `shape` (batch of 1 first); returns the last output shape.
Shape build_list(const std::vector<Entry>& entries, Shape shape, const std::string& prefix,
                 std::vector<std::unique_ptr<Layer>>& layers, Tokens& tokens) {
  std::map<std::string, int> counts;
  for (const Entry& e : entries) {
    const std::string base = base_name(e.kind);
    const std::string name = prefix + base + std::to_string(++counts[base]);
    const std::string where = quoted(e) + " (" + name + ")";
    const auto& a = e.args;
    const bool image = shape.size() == 4;
    if (!image && (e.kind == "conv" || e.kind == "bn" || e.kind == "maxpool" || e.kind == "avgpool" || e.kind == "gap"))
      throw ConfigError(where + ": expects an input [B, C, H, W], got " + shape_string(shape) +
                        " (shapes for a batch of 1)");
    std::unique_ptr<Layer> layer;
    if (e.kind == "residual") {
      std::vector<std::unique_ptr<Layer>> branch, shortcut;
      build_list(e.branch, shape, name + ".", branch, tokens);
      build_list(e.shortcut, shape, name + ".shortcut.", shortcut, tokens);
      try {
        layer = make_residual(name, std::move(branch), std::move(shortcut));
      } catch (const ConfigError& error) {
        throw ConfigError(where + ": " + error.what());
      }
    } else if (e.kind == "conv") {
      layer = make_conv2d(name, shape[1], std::stoll(a[0]), integer_after(a, 'k', 1), integer_after(a, 's', 1),
                          integer_after(a, 'p', 0));
    } else if (e.kind == "linear" && tokens.embed && shape.size() == 3) {
      // On tokens, each token's features alone, initialised as the gpt model's.
      layer = make_token_linear(name, shape[2], std::stoll(a[0]));
    } else if (e.kind == "linear") {
      int64_t features = 1;
      for (size_t i = 1; i < shape.size(); ++i) features *= shape[i];
      // The classifier (the list's last layer) starts as PyTorch's nn.Linear and the built-in
      // models' last layer do; the layers before it, ahead of a ReLU, He-uniform.
      const bool classifier = prefix.empty() && &e == &entries.back();
      layer = make_linear(name, features, std::stoll(a[0]), classifier ? Init::fan_in_uniform : Init::he_uniform);
    } else if (e.kind == "maxpool" || e.kind == "avgpool") {
      const int64_t k = std::stoll(a[0]), s = a.size() == 2 ? std::stoll(a[1].substr(1)) : k;
      layer = e.kind == "maxpool" ? make_max_pool2d(name, k, s) : make_avg_pool2d(name, k, s);
    } else if (e.kind == "gap") {
      layer = make_global_avg_pool2d(name);
    } else if (e.kind == "bn") {
      layer = make_batch_norm2d(name, shape[1]);
    } else if (e.kind == "relu") {
      layer = make_relu(name);
    } else if (e.kind == "flatten") {
      layer = make_flatten(name);
    } else if (e.kind == "embed") {
      if (e.position != "1")
        throw ConfigError(where + ": embed takes the token ids, so it must be the list's first entry, not entry " +
                          e.position);
      if (shape.size() != 2)
        throw ConfigError(where + ": expects token ids [B, T], model.input_shape = T (one integer: the window's " +
                          "length); got " + shape_string(shape) + " (shapes for a batch of 1)");
      tokens.embed = &e;
      tokens.embed_name = name;
      tokens.vocab = std::stoll(a[0]);
      tokens.dim = std::stoll(a[1]);
      // nopositions: the table's row alone, for attention that needs no learned position (the
      // causal mask orders the tokens) or places them itself.
      const bool positions = a.size() < 3 || a[2] == "positions";
      layer = make_token_embedding(name, tokens.vocab, positions ? shape[1] : kNoPositions, tokens.dim,
                                   tokens.table_shared);
    } else if (e.kind == "layernorm") {
      if (shape.size() != 2 && shape.size() != 3)
        throw ConfigError(where + ": normalises the last dimension of [B, features] or [B, T, features], got " +
                          shape_string(shape) + " (shapes for a batch of 1)");
      layer = make_layer_norm(name, shape.back());
    } else if (e.kind == "gelu") {
      layer = make_gelu(name);
    } else if (e.kind == "attention") {
      if (!tokens.embed || shape.size() != 3)
        throw ConfigError(where + ": expects token activations [B, T, 3 x dim] after an embed entry, got " +
                          shape_string(shape) + " (shapes for a batch of 1)");
      const int64_t heads = std::stoll(a[0]), width = shape[2];
      if (width % 3 != 0)
        throw ConfigError(where + ": expects queries, keys and values [B, T, 3 x dim] (a linear of 3 x dim before " +
                          "it), got " + shape_string(shape) + ": " + std::to_string(width) +
                          " is not a multiple of 3 (shapes for a batch of 1)");
      if ((width / 3) % heads != 0)
        throw ConfigError(where + ": " + std::to_string(heads) +
                          " heads do not divide dim = " + std::to_string(width / 3) + " (the input's width " +
                          std::to_string(width) + " / 3); expected a divisor of it (a head's width is dim / heads)");
      layer = make_attention(name, width / 3, heads, a.size() < 2 || a[1] == "causal");
    } else if (e.kind == "tied_head") {
      if (!tokens.embed)
        throw ConfigError(where + ": uses the table of an embed entry, and no embed entry comes before it");
      if (!tokens.head_name.empty())
        throw ConfigError(where + ": the table of entry 1 '" + tokens.embed->text + "' is already tied to " +
                          tokens.head_name + "; it ties one head");
      if (shape.size() != 3 || shape[2] != tokens.dim)
        throw ConfigError(where + ": expects [B, T, " + std::to_string(tokens.dim) + "], the width of entry 1 '" +
                          tokens.embed->text + "', got " + shape_string(shape) + " (shapes for a batch of 1)");
      tokens.head_name = name;
      layer = make_tied_head(name, tokens.embed_name, tokens.vocab, tokens.dim);
    } else if (e.kind == "dropout") {
      layer = make_dropout(name, std::strtof(a[0].c_str(), nullptr));
    } else {
      // A layer plugin's kind (the parser found it): its factory checks its arguments.
      try {
        layer = find_layer_plugin(e.kind)->make(LayerEntry{name, a, shape});
      } catch (const ConfigError& error) {
        throw ConfigError(where + ": " + error.what());
      }
      if (!layer) throw ConfigError(where + ": layer plugin '" + e.kind + "' made no layer");
    }
    try {
      shape = layer->output_shape(shape);
    } catch (const ConfigError& error) {
      throw ConfigError(where + ": " + error.what() + " (shapes for a batch of 1)");
    }
    layers.push_back(std::move(layer));
  }
  return shape;
}

}  // namespace

std::vector<Entry> parse(const std::string& text) { return Parser(text).parse_all(); }

std::vector<std::unique_ptr<Layer>> build(const std::vector<Entry>& entries, const Shape& sample_shape) {
  Shape shape{1};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  std::vector<std::unique_ptr<Layer>> layers;
  Tokens tokens;
  // The embedding is built before the head that shares its table, so it is told ahead.
  tokens.table_shared = contains_kind(entries, "tied_head");
  shape = build_list(entries, shape, "", layers, tokens);
  // The loss takes logits: per sample, or per token over the vocabulary the embed reads.
  const std::string last = "the last entry '" + entries.back().text + "' gives " + shape_string(shape) +
                           " for a batch of 1; expected logits ";
  if (tokens.embed) {
    const std::string vocab = std::to_string(tokens.vocab);
    if (shape.size() != 3 || shape[2] != tokens.vocab)
      throw ConfigError(last + "[B, T, " + vocab + "], over the vocabulary of entry 1 '" + tokens.embed->text +
                        "': end with tied_head or linear " + vocab);
  } else if (shape.size() != 2) {
    throw ConfigError(last + "[B, classes]: end with linear N");
  }
  return layers;
}

int64_t sequence_length(const std::vector<Entry>& entries, const Shape& sample_shape) {
  return !entries.empty() && entries.front().kind == "embed" && sample_shape.size() == 1 ? sample_shape[0] : 0;
}

}  // namespace mgt::layer_list
