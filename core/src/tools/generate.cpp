#include "tools/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "datasets/tokenizer.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/layer_description.hpp"
#include "mgtrain/ops.hpp"
#include "mgtrain/rng.hpp"
#include "runtime/evaluate.hpp"

namespace mgt {

namespace {

// The byte tokenizer's vocabulary: a token is a byte, so only ids below 256 can be written out.
constexpr int64_t kByteTokens = 256;

std::string hex_byte(unsigned char byte) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", byte);
  return text;
}

}  // namespace

int64_t sample_token(const float* logits, int64_t candidates, const Sampling& sampling, uint64_t index) {
  MGT_CHECK(candidates > 0, Error, "sample_token: no candidate tokens");
  for (int64_t id = 0; id < candidates; ++id)
    MGT_CHECK(std::isfinite(logits[id]), Error,
              "generated token " + std::to_string(index) + ": the model's logit for token " + std::to_string(id) +
                  " is " + std::to_string(logits[id]) + ", expected a finite number (did training diverge?)");
  if (sampling.temperature == 0) return std::max_element(logits, logits + candidates) - logits;

  // The k most likely ids, equal logits in id order: a strict order, so the same on every run.
  std::vector<int64_t> ids(static_cast<size_t>(candidates));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  const auto more_likely = [logits](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (sampling.top_k > 0 && sampling.top_k < candidates) {
    std::partial_sort(ids.begin(), ids.begin() + sampling.top_k, ids.end(), more_likely);
    ids.resize(static_cast<size_t>(sampling.top_k));
    std::sort(ids.begin(), ids.end());
  }
  double largest = -std::numeric_limits<double>::infinity();
  for (int64_t id : ids) largest = std::max(largest, static_cast<double>(logits[id]));
  // Weights exp((logit - largest) / T) in double: at most 1, and a tiny T underflows to 0, not NaN.
  std::vector<double> weights(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    weights[i] = std::exp((static_cast<double>(logits[ids[i]]) - largest) / sampling.temperature);
    total += weights[i];
  }
  const uint64_t key = rng::make_key(sampling.seed, rng::purpose_hash("generate"));
  const double target = static_cast<double>(rng::uniform(key, 0, index)) * total;
  double cumulative = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cumulative += weights[i];
    if (target < cumulative) return ids[i];
  }
  // Rounding can leave the target at the very end: the last id with any weight.
  for (size_t i = ids.size(); i-- > 0;)
    if (weights[i] > 0) return ids[i];
  return ids.back();
}

// One layer of the cached forward, from its description; a residual block holds its paths.
struct CachedForward::Node {
  LayerKind kind = LayerKind::none;
  const float* weight = nullptr;
  const float* bias = nullptr;
  int64_t in = 0, out = 0;  // features per token
  int64_t table_rows = 0;   // token embedding: the vocabulary
  float epsilon = 0;        // layer norm
  int64_t heads = 0;        // attention
  std::vector<Node> branch, shortcut;
  std::vector<float> keys, values;  // attention: [context, dim], one row per token so far
};

namespace {

using Node = CachedForward::Node;

std::string describe_layer(const Layer& layer) { return "layer '" + layer.name() + "'"; }

// Turns the layers' descriptions into nodes; `features` is the width of a token's row going in
// (0: token ids) and coming out. False, with `why`, for what the cache cannot run.
bool compile(const std::vector<const Layer*>& layers, ParameterStore& store, int64_t context, int64_t& features,
             std::vector<Node>& nodes, std::string* why) {
  for (const Layer* layer : layers) {
    const LayerDescription d = layer->describe();
    Node node;
    node.kind = d.kind;
    node.in = features;
    const auto param = [&](size_t i, const Shape& shape) -> const float* {
      if (i >= d.params.size() || d.params[i] >= store.params().size()) return nullptr;
      if (store.info(d.params[i]).shape != shape) return nullptr;
      return store.param(d.params[i]);
    };
    const auto refuse = [&](const std::string& what) {
      *why = describe_layer(*layer) + " " + what;
      return false;
    };
    if (features == 0 && d.kind != LayerKind::token_embedding)
      return refuse("comes first, where a token embedding was expected");
    switch (d.kind) {
      case LayerKind::token_embedding: {
        if (features != 0) return refuse("is a token embedding after the first layer");
        // {table} alone (no position term) or {table, position table}.
        const bool positions = d.params.size() == 2;
        if ((d.params.size() != 1 && !positions) || d.params[0] >= store.params().size() ||
            (positions && d.params[1] >= store.params().size()))
          return refuse("describes a token embedding with " + std::to_string(d.params.size()) +
                        " parameter(s), expected its table and, optionally, its position table");
        const Shape table = store.info(d.params[0]).shape;
        if (table.size() != 2) return refuse("has a table of " + shape_string(table) + ", expected [vocab, dim]");
        if (positions) {
          const Shape position = store.info(d.params[1]).shape;
          if (position.size() != 2 || table[1] != position[1] || position[0] < context)
            return refuse("has tables " + shape_string(table) + " and " + shape_string(position) +
                          ", expected [vocab, dim] and [positions >= " + std::to_string(context) + ", dim]");
          node.bias = store.param(d.params[1]);  // the position table
        }
        node.weight = store.param(d.params[0]);
        node.table_rows = table[0];
        node.out = table[1];
        break;
      }
      case LayerKind::layer_norm: {
        node.out = features;
        node.weight = param(0, {features});
        node.bias = param(1, {features});
        if (!node.weight || !node.bias) return refuse("has no weight and bias of [" + std::to_string(features) + "]");
        node.epsilon = 1e-5f;
        for (const auto& [name, value] : d.floats)
          if (name == "epsilon") node.epsilon = value;
        break;
      }
      case LayerKind::token_linear: {
        if (d.params.empty() || d.params[0] >= store.params().size()) return refuse("has no weight");
        const Shape w = store.info(d.params[0]).shape;
        if (w.size() != 2 || w[1] != features)
          return refuse("has a weight of " + shape_string(w) + " for " + std::to_string(features) + " features");
        node.out = w[0];
        node.weight = param(0, w);
        node.bias = param(1, {node.out});
        if (!node.bias) return refuse("has no bias of [" + std::to_string(node.out) + "]");
        break;
      }
      case LayerKind::tied_head: {
        if (d.params.empty() || d.params[0] >= store.params().size()) return refuse("has no table");
        const Shape table = store.info(d.params[0]).shape;
        if (table.size() != 2 || table[1] != features)
          return refuse("has a table of " + shape_string(table) + " for " + std::to_string(features) + " features");
        node.out = table[0];
        node.weight = store.param(d.params[0]);
        break;
      }
      case LayerKind::gelu_tanh:
      case LayerKind::relu:
      case LayerKind::dropout:  // the identity outside training
        node.out = features;
        break;
      case LayerKind::attention: {
        int64_t causal = 0;
        for (const auto& [name, value] : d.ints) {
          if (name == "heads") node.heads = value;
          if (name == "causal") causal = value;
        }
        if (!causal) return refuse("is bidirectional: a token would see the tokens after it, which are not there yet");
        if (features % 3 != 0 || node.heads < 1 || (features / 3) % node.heads != 0)
          return refuse("takes " + std::to_string(features) + " features per token in " + std::to_string(node.heads) +
                        " heads, expected 3 x dim with dim a multiple of the heads");
        node.out = features / 3;
        node.keys.assign(static_cast<size_t>(context * node.out), 0.0f);
        node.values.assign(static_cast<size_t>(context * node.out), 0.0f);
        break;
      }
      case LayerKind::residual: {
        int64_t branch = features, shortcut = features;
        if (!compile(d.branch, store, context, branch, node.branch, why)) return false;
        if (!compile(d.shortcut, store, context, shortcut, node.shortcut, why)) return false;
        if (branch != shortcut)
          return refuse("adds paths of " + std::to_string(branch) + " and " + std::to_string(shortcut) + " features");
        node.out = branch;
        break;
      }
      default:
        // A linear layer flattens the window, a convolution or a plugin's operator is not known
        // to treat each token on its own.
        return refuse("has no cached form (its kind is not one a token's pass can run alone)");
    }
    features = node.out;
    nodes.push_back(std::move(node));
  }
  return true;
}

// Causal attention of `rows` new tokens at positions first.. over every token so far: their keys
// and values join the cache, then each head's scores, softmax (the kernel the layer uses, over the
// positions a token sees) and weighted values.
void attend(Node& node, Ops& ops, const float* qkv, float* y, int64_t rows, int64_t first) {
  const int64_t dim = node.out, head_dim = dim / node.heads, ld = 3 * dim, length = first + rows;
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(qkv + r * ld + dim, dim, node.keys.data() + (first + r) * dim);
    std::copy_n(qkv + r * ld + 2 * dim, dim, node.values.data() + (first + r) * dim);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> scores(static_cast<size_t>(rows * length));
  for (int64_t h = 0; h < node.heads; ++h) {
    ops.gemm(false, true, rows, length, head_dim, 1.0f, qkv + h * head_dim, ld, node.keys.data() + h * head_dim, dim,
             0.0f, scores.data(), length);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = scores.data() + r * length;
      const int64_t seen = first + r + 1;
      ops.softmax_rows(row, row, 1, seen, scale, false);
      std::fill(row + seen, row + length, 0.0f);
    }
    ops.gemm(false, false, rows, head_dim, length, 1.0f, scores.data(), length, node.values.data() + h * head_dim, dim,
             0.0f, y + h * head_dim, dim);
  }
}

// Runs the nodes on `rows` tokens at positions first..; x holds their rows going in (token ids
// as floats before the embedding) and coming out.
void run_nodes(std::vector<Node>& nodes, Ops& ops, std::vector<float>& x, int64_t rows, int64_t first) {
  std::vector<float> y;
  for (Node& node : nodes) {
    y.assign(static_cast<size_t>(rows * node.out), 0.0f);
    switch (node.kind) {
      case LayerKind::token_embedding:
        for (int64_t r = 0; r < rows; ++r) {
          const auto id = static_cast<int64_t>(x[r]);
          MGT_CHECK(id >= 0 && id < node.table_rows, Error,
                    "token " + std::to_string(id) + " is outside the embedding's " + std::to_string(node.table_rows) +
                        " rows");
          const float* token = node.weight + id * node.out;
          if (!node.bias) {  // no position term
            std::copy_n(token, node.out, y.data() + r * node.out);
            continue;
          }
          const float* position = node.bias + (first + r) * node.out;
          for (int64_t c = 0; c < node.out; ++c) y[r * node.out + c] = token[c] + position[c];
        }
        break;
      case LayerKind::layer_norm:
        ops.layer_norm_forward(x.data(), node.weight, node.bias, y.data(), rows, node.out, node.epsilon);
        break;
      case LayerKind::token_linear:
        ops.broadcast_rows(node.bias, y.data(), rows, node.out);
        ops.gemm(false, true, rows, node.out, node.in, 1.0f, x.data(), node.in, node.weight, node.in, 1.0f, y.data(),
                 node.out);
        break;
      case LayerKind::tied_head:
        ops.gemm(false, true, rows, node.out, node.in, 1.0f, x.data(), node.in, node.weight, node.in, 0.0f, y.data(),
                 node.out);
        break;
      case LayerKind::gelu_tanh:
        ops.gelu_forward(x.data(), y.data(), rows * node.out);
        break;
      case LayerKind::relu:
        ops.relu_forward(x.data(), y.data(), rows * node.out);
        break;
      case LayerKind::dropout:
        y = x;
        break;
      case LayerKind::attention:
        attend(node, ops, x.data(), y.data(), rows, first);
        break;
      case LayerKind::residual: {
        std::vector<float> branch = x;
        run_nodes(node.branch, ops, branch, rows, first);
        run_nodes(node.shortcut, ops, x, rows, first);  // no layers: the identity
        ops.binary(BinaryOp::add, branch.data(), x.data(), y.data(), rows * node.out);
        break;
      }
      default:
        throw Error("cached forward: a node of an unexpected kind");
    }
    x.swap(y);
  }
}

}  // namespace

std::unique_ptr<CachedForward> CachedForward::make(const Model& model, ParameterStore& store, int64_t context,
                                                   std::string* why) {
  const std::vector<const Layer*> layers = model.export_layers();
  if (layers.empty()) {
    *why = "the model is not a stack of layers";
    return nullptr;
  }
  std::unique_ptr<CachedForward> cache(new CachedForward);
  cache->context_ = context;
  int64_t features = 0;
  if (!compile(layers, store, context, features, cache->nodes_, why)) return nullptr;
  const Shape logits = model.output_shape({1, context});
  if (features != logits.back()) {
    *why = "its layers end in " + std::to_string(features) + " features, but the model gives logits of " +
           shape_string(logits);
    return nullptr;
  }
  return cache;
}

CachedForward::~CachedForward() = default;

const std::vector<float>& CachedForward::append(const int32_t* tokens, int64_t count) {
  MGT_CHECK(count > 0 && length_ + count <= context_, Error,
            "cached forward: " + std::to_string(length_) + " + " + std::to_string(count) +
                " tokens do not fit the context of " + std::to_string(context_));
  std::vector<float> x(tokens, tokens + count);
  run_nodes(nodes_, host_ops(), x, count, length_);
  length_ += count;
  const int64_t vocabulary = static_cast<int64_t>(x.size()) / count;
  logits_.assign(x.end() - vocabulary, x.end());
  return logits_;
}

void CachedForward::clear() { length_ = 0; }

TokenGenerator::TokenGenerator(Model& model, ParameterStore& store) : model_(model) {
  context_ = model.sequence_length();
  MGT_CHECK(context_ > 0, ConfigError, "the model reads no token windows (its sequence length is 0)");
  const Shape logits = model.output_shape({1, context_});
  MGT_CHECK(logits.size() == 3 && logits[0] == 1 && logits[1] == context_, ConfigError,
            "the model gives logits of " + shape_string(logits) + " for a window of " + std::to_string(context_) +
                " tokens, expected [1, " + std::to_string(context_) + ", vocabulary]");
  vocabulary_ = logits[2];
  cache_ = CachedForward::make(model, store, context_, &uncached_reason_);
}

TokenGenerator::~TokenGenerator() = default;

const std::vector<float>& TokenGenerator::start(const std::vector<int32_t>& prompt) {
  MGT_CHECK(!prompt.empty(), Error, "generate: an empty prompt");
  const size_t keep = std::min(prompt.size(), static_cast<size_t>(context_));
  window_.assign(prompt.end() - static_cast<std::ptrdiff_t>(keep), prompt.end());
  recompute();
  return logits_;
}

const std::vector<float>& TokenGenerator::push(int32_t token) {
  if (static_cast<int64_t>(window_.size()) == context_) {
    // Every token moves down one position and the first leaves the window (what the others
    // attended to): the cached keys and values no longer hold, with or without a position table.
    window_.erase(window_.begin());
    window_.push_back(token);
    recompute();
    return logits_;
  }
  window_.push_back(token);
  if (cache_)
    logits_ = cache_->append(&window_.back(), 1);
  else
    logits_ = full_forward();
  return logits_;
}

void TokenGenerator::recompute() {
  if (cache_) {
    cache_->clear();
    logits_ = cache_->append(window_.data(), static_cast<int64_t>(window_.size()));
  } else {
    logits_ = full_forward();
  }
}

std::vector<float> TokenGenerator::full_forward() {
  const auto length = static_cast<int64_t>(window_.size());
  Tensor ids({1, length});
  for (int64_t i = 0; i < length; ++i) ids.data()[i] = static_cast<float>(window_[static_cast<size_t>(i)]);
  StepContext step;
  step.training = false;
  const Tensor& out = model_.forward(ids, step);
  const float* last = out.data() + (length - 1) * vocabulary_;
  return std::vector<float>(last, last + vocabulary_);
}

GenerateSummary generate_text(const GenerateOptions& options, const std::function<void(char)>& write) {
  MGT_CHECK(!options.prompt.empty(), ConfigError,
            "generate: --prompt is empty: expected at least one byte for the model to continue");
  MGT_CHECK(options.tokens > 0, ConfigError,
            "generate: --tokens: expected a positive integer, got " + std::to_string(options.tokens));
  CheckpointModel loaded(options.checkpoint, options.plugin_paths);
  GenerateSummary summary;
  summary.model_name = loaded.config.get_string("model.name");
  const std::string where = "checkpoint '" + options.checkpoint + "'";
  if (loaded.model->sequence_length() <= 0)
    throw ConfigError("generate: " + where + " holds model '" + summary.model_name +
                      "', which reads samples and gives class logits: expected a language model, one that reads "
                      "token windows (model.name = gpt)");
  // A masked language model's logits at a position are for that position's own token, not the next.
  if (loaded.config.has("model.objective") && loaded.config.get_string("model.objective") == "mlm")
    throw ConfigError("generate: " + where + " holds model '" + summary.model_name +
                      "', a masked language model (model.objective = mlm), whose logits fill in masked tokens: "
                      "expected a model that predicts the next token (model.name = gpt)");
  TokenGenerator generator(*loaded.model, loaded.store);
  summary.context = generator.context();
  summary.vocabulary = generator.vocabulary();
  summary.cached = generator.cached();

  // A model trained on a SentencePiece file's ids reads and writes text through the tokenizer its
  // checkpoint keeps; otherwise a token is a byte.
  std::optional<data::Tokenizer> tokenizer;
  if (!loaded.stored.tokenizer_model.empty())
    tokenizer.emplace(loaded.stored.tokenizer_model, where + " (its /tokenizer)");
  std::vector<int32_t> prompt;
  if (tokenizer) {
    prompt = tokenizer->encode(options.prompt);
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] < 0 || prompt[i] >= summary.vocabulary)
        throw DataError("generate: --prompt: token " + std::to_string(i) + " is " + std::to_string(prompt[i]) +
                        ", outside the vocabulary of model '" + summary.model_name + "' in " + where +
                        ": expected tokens below " + std::to_string(summary.vocabulary));
  }
  prompt.reserve(options.prompt.size());
  for (size_t i = 0; !tokenizer && i < options.prompt.size(); ++i) {
    const auto byte = static_cast<unsigned char>(options.prompt[i]);
    if (byte >= summary.vocabulary)
      throw DataError("generate: --prompt: byte " + std::to_string(i) + " is " + hex_byte(byte) + " (token " +
                      std::to_string(byte) + "), outside the vocabulary of model '" + summary.model_name + "' in " +
                      where + ": expected tokens below " + std::to_string(summary.vocabulary));
    prompt.push_back(byte);
  }
  if (!generator.cached())
    std::fprintf(stderr,
                 "mgtrain: note: generating without a cache: %s; each token is a forward over the whole window\n",
                 printable(generator.uncached_reason()).c_str());

  // A token beyond the tokenizer's has no text to write: only its tokens are drawn.
  const int64_t candidates = std::min(summary.vocabulary, tokenizer ? tokenizer->vocab_size() : kByteTokens);
  // The tokenizer's text of the tokens so far, written as it grows: a character of several byte
  // pieces appears once all of them are drawn.
  std::vector<int32_t> drawn;
  size_t written = 0;
  const auto emit = [&](int64_t token, bool last) {
    if (!tokenizer) {
      write(static_cast<char>(static_cast<unsigned char>(token)));
      return;
    }
    drawn.push_back(static_cast<int32_t>(token));
    const std::string text = tokenizer->decode(drawn);
    // Hold back trailing U+FFFDs (an unfinished character) until the next piece completes it.
    size_t stable = text.size();
    while (!last && stable >= 3 && text.compare(stable - 3, 3, "\xef\xbf\xbd") == 0) stable -= 3;
    for (; written < stable; ++written) write(text[written]);
  };
  const auto check = [&](const std::vector<float>& logits, int64_t index) {
    if (!options.check_cache) return;
    const std::vector<float> full = generator.full_forward();
    double largest = 0, difference = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(full[i])));
      difference = std::max(difference, std::fabs(static_cast<double>(logits[i]) - full[i]));
    }
    const double relative = difference / std::max(largest, static_cast<double>(std::numeric_limits<float>::min()));
    summary.largest_difference = std::max(summary.largest_difference, relative);
    ++summary.checked;
    if (!(relative <= kCacheTolerance))
      throw Error("generate --check-cache: token " + std::to_string(index) + " (a window of " +
                  std::to_string(generator.window().size()) + " tokens): the cached logits differ from the model's " +
                  "forward over the window by " + std::to_string(relative) +
                  " of their largest magnitude, expected at most " + std::to_string(kCacheTolerance));
  };

  if (options.echo)
    for (char byte : options.prompt) write(byte);
  const std::vector<float>* logits = &generator.start(prompt);
  for (int64_t i = 0; i < options.tokens; ++i) {
    check(*logits, i);
    const int64_t token = sample_token(logits->data(), candidates, options.sampling, static_cast<uint64_t>(i));
    emit(token, i + 1 == options.tokens);
    if (i + 1 == options.tokens) break;
    if (static_cast<int64_t>(generator.window().size()) == generator.context()) ++summary.window_recomputations;
    logits = &generator.push(static_cast<int32_t>(token));
  }
  return summary;
}

}  // namespace mgt
