#pragma once
// `mgtrain generate`: a language model's checkpoint continues a prompt, one token at a time, on
// the host. Each attention layer keeps the keys and values of the tokens before (a KV cache), so a
// new token is one pass of one token through the layers, not a pass over the whole window. The
// cached path runs the model's own layers from their descriptions (Layer::describe, as `mgtrain
// export` reads them) over the checkpoint's parameters, with the CPU operations the layers use; a
// model with a layer it does not know runs the model's forward over the window for every token.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/model.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

// How the next token is drawn from its logits.
struct Sampling {
  double temperature = 1.0;  // 0: always the most likely token (arg-max)
  int64_t top_k = 0;         // > 0: only the k most likely tokens may be drawn; 0: any
  uint64_t seed = 0;
};

// The token drawn as generated token `index` from `logits`, of which the first `candidates` ids
// may be drawn: the arg-max (the lowest id among equals) at temperature 0, otherwise one of
// softmax(logits / temperature) over the top k, picked by the counter-based RNG's uniform number
// for (seed, index). A pure function of its arguments. Throws Error when a logit is not finite.
int64_t sample_token(const float* logits, int64_t candidates, const Sampling& sampling, uint64_t index);

// The model's layers run on tokens appended one pass at a time: each pass computes only its own
// tokens, their attention reading the keys and values kept from the passes before.
class CachedForward {
 public:
  // Null when a layer has no cached form (an unknown kind, a bidirectional attention, a layer
  // that mixes the tokens of a window otherwise); `why` then names it.
  static std::unique_ptr<CachedForward> make(const Model& model, ParameterStore& store, int64_t context,
                                             std::string* why);
  ~CachedForward();
  // Runs `count` tokens at the positions length() on and returns the last one's logits
  // (vocabulary floats, valid until the next call). length() + count must not exceed the context.
  const std::vector<float>& append(const int32_t* tokens, int64_t count);
  void clear();  // forgets every token
  int64_t length() const { return length_; }

  struct Node;

 private:
  CachedForward() = default;
  std::vector<Node> nodes_;
  int64_t context_ = 0;
  int64_t length_ = 0;
  std::vector<float> logits_;
};

// A language model continuing a window of at most sequence_length() tokens (its context): the
// next token's logits after each change. Once the window is full, a new token pushes the oldest
// out and the cache is computed again over the window (the positions have all moved).
class TokenGenerator {
 public:
  // `store` holds the model's loaded parameters; the model must read token windows
  // (sequence_length() > 0). Uses the cache when the model's layers have a cached form.
  TokenGenerator(Model& model, ParameterStore& store);
  ~TokenGenerator();
  int64_t context() const { return context_; }
  int64_t vocabulary() const { return vocabulary_; }  // the logits' size
  bool cached() const { return cache_ != nullptr; }
  const std::string& uncached_reason() const { return uncached_reason_; }

  // Starts again from `prompt` (its last context() tokens, each below vocabulary()).
  const std::vector<float>& start(const std::vector<int32_t>& prompt);
  // Appends a token to the window.
  const std::vector<float>& push(int32_t token);
  const std::vector<float>& logits() const { return logits_; }
  const std::vector<int32_t>& window() const { return window_; }
  // The last token's logits from the model's own forward over the whole window (the executor, as
  // `mgtrain eval` runs it): what the cached logits must match.
  std::vector<float> full_forward();

 private:
  void recompute();

  Model& model_;
  int64_t context_ = 0;
  int64_t vocabulary_ = 0;
  std::unique_ptr<CachedForward> cache_;
  std::string uncached_reason_;
  std::vector<int32_t> window_;
  std::vector<float> logits_;
};

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;  // raw bytes, one token each
  int64_t tokens = 0;  // bytes to generate
  Sampling sampling;
  bool echo = false;  // writes the prompt first, once every check has passed
  // Also runs the model's forward over the window for every token, comparing its logits with the
  // cache's (relative to their largest magnitude); an Error past kCacheTolerance.
  bool check_cache = false;
  std::vector<std::string> plugin_paths;
};

inline constexpr double kCacheTolerance = 1e-4;

struct GenerateSummary {
  std::string model_name;
  int64_t context = 0;
  int64_t vocabulary = 0;
  bool cached = false;
  int64_t checked = 0;                // logits compared with the full forward (check_cache)
  double largest_difference = 0;      // the largest of those differences, relative
  int64_t window_recomputations = 0;  // times the full window pushed its oldest token out
};

// Loads the checkpoint's model as `mgtrain eval` does (CheckpointModel), checks that it is a
// language model and that the prompt's bytes are in its vocabulary, then hands `write` each
// generated byte as it is drawn. Every check on the input is made before the first byte: an Error
// naming the checkpoint or the prompt leaves nothing written.
GenerateSummary generate_text(const GenerateOptions& options, const std::function<void(char)>& write);

}  // namespace mgt
