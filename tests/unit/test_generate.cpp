// Text generation: the sampler's rules, and the KV cache's logits against the model's own forward
// over the same window, on the gpt model plugin built from the build tree.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "loader/plugin_loader.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/rng.hpp"
#include "tools/generate.hpp"

using namespace mgt;

namespace {

Sampling sampling(double temperature, int64_t top_k = 0, uint64_t seed = 0) {
  Sampling s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.seed = seed;
  return s;
}

// The gpt plugin with every parameter drawn from U(-0.5, 0.5): far from GPT-2's small start, so
// attention does not spread evenly and a wrong mask or position shows in the logits.
struct GptModel {
  explicit GptModel(const std::string& extra_keys, const std::string& plugin = "gpt",
                    const std::string& plugin_keys = "layers = 2\nheads = 2\ndim = 16\ncontext = 8\n") {
    Config config = Config::from_string("[model]\nname = " + plugin + "\n" + plugin_keys + extra_keys, "test");
    auto keys = registry.config_keys("model", plugin);
    keys.push_back({"model.name", KeyType::string, nullptr, "model"});
    config.validate(keys);
    model = registry.create_model(plugin, config);
    model->declare(store);
    store.finalize();
    rng::fill_uniform(store.params_data(), store.flat_size(), -0.5f, 0.5f, rng::make_key(11, 0), 0);
  }
  PluginRegistry registry;  // outlives the model its library made
  ParameterStore store;
  std::unique_ptr<Model> model;
};

// The largest difference between the cached logits and the model's forward over the window,
// relative to the forward's largest magnitude.
double cache_difference(TokenGenerator& generator) {
  const std::vector<float> full = generator.full_forward();
  const std::vector<float>& cached = generator.logits();
  EXPECT_EQ(full.size(), cached.size());
  double largest = 0, difference = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(full[i])));
    difference = std::max(difference, std::fabs(static_cast<double>(cached[i]) - full[i]));
  }
  EXPECT_GT(largest, 0.1);  // logits of substance, not a vanishing model
  return difference / largest;
}

void expect_cache_matches_forward(GptModel& gpt) {
  TokenGenerator generator(*gpt.model, gpt.store);
  ASSERT_TRUE(generator.cached()) << generator.uncached_reason();
  EXPECT_EQ(generator.context(), 8);
  EXPECT_EQ(generator.vocabulary(), 256);
  generator.start({72, 105, 33});
  EXPECT_LT(cache_difference(generator), 1e-5);
  // One-token passes, then (past 8 tokens) the window sliding and computed again.
  for (int32_t token = 40; token < 60; ++token) {
    generator.push(token);
    EXPECT_LE(generator.window().size(), 8u);
    EXPECT_EQ(generator.window().back(), token);
    EXPECT_LT(cache_difference(generator), 1e-5) << "after token " << token;
  }
  // A prompt longer than the context keeps its last 8 tokens.
  std::vector<int32_t> prompt;
  for (int32_t t = 0; t < 20; ++t) prompt.push_back(100 + t);
  generator.start(prompt);
  EXPECT_EQ(generator.window(), std::vector<int32_t>(prompt.end() - 8, prompt.end()));
  EXPECT_LT(cache_difference(generator), 1e-5);
}

}  // namespace

TEST(Generate, CachedLogitsMatchTheForwardOverTheWindowTiedHead) {
  GptModel gpt("");
  expect_cache_matches_forward(gpt);
}

TEST(Generate, CachedLogitsMatchTheForwardOverTheWindowUntiedHeadWithDropout) {
  GptModel gpt("tie_weights = false\ndropout = 0.2\n");
  expect_cache_matches_forward(gpt);
}

TEST(Generate, CachedLogitsMatchTheForwardOverTheWindowWithoutPositions) {
  // The layers model with an embedding of the table alone: the cache adds no position row.
  GptModel declared("", "layers",
                    "input_shape = 8\nlayers = embed 256 16 nopositions, "
                    "residual { layernorm, linear 48, attention 2 causal, linear 16 }, "
                    "residual { layernorm, linear 64, gelu, linear 16 }, layernorm, tied_head\n");
  for (const auto& info : declared.store.params()) ASSERT_EQ(info.name.find("position"), std::string::npos);
  expect_cache_matches_forward(declared);
}

TEST(Generate, ALayerWithoutACachedFormRunsTheForwardOverTheWindow) {
  // Bidirectional attention lets a token see those after it: no cache can hold that.
  class Encoder final : public SequentialModel {
   public:
    Encoder() {
      add(make_token_embedding("wte", 16, 4, 6));
      add(make_token_linear("qkv", 6, 18));
      add(make_attention("attn", 6, 2, /*causal=*/false));
      add(make_token_linear("head", 6, 16));
    }
    int64_t sequence_length() const override { return 4; }
  } encoder;
  ParameterStore store;
  encoder.declare(store);
  store.finalize();
  store.initialize(3);
  TokenGenerator generator(encoder, store);
  EXPECT_FALSE(generator.cached());
  EXPECT_NE(generator.uncached_reason().find("layer 'attn' is bidirectional"), std::string::npos)
      << generator.uncached_reason();
  generator.start({1, 2, 3});
  for (int32_t token = 4; token < 10; ++token) {
    const std::vector<float> logits = generator.push(token);
    EXPECT_EQ(logits, generator.full_forward());
  }
  EXPECT_EQ(generator.window(), (std::vector<int32_t>{6, 7, 8, 9}));
}

TEST(Generate, GreedyIsTheArgMaxAndTheLowestIdAmongEquals) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  for (uint64_t index = 0; index < 10; ++index) {
    EXPECT_EQ(sample_token(logits.data(), 5, sampling(0, 0, index), index), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, sampling(1.0, 1, index), index), 1);  // top-1
  }
  // Only the first `candidates` ids may be drawn.
  EXPECT_EQ(sample_token(logits.data(), 1, sampling(0), 0), 0);
  EXPECT_EQ(sample_token(logits.data(), 3, sampling(5.0, 0, 3), 7) < 3, true);
}

TEST(Generate, DrawsArePureFunctionsOfSeedAndIndex) {
  const std::vector<float> logits = {0.1f, 0.3f, 0.2f, 0.4f, 0.0f, 0.25f};
  std::vector<int64_t> a, b, c;
  for (uint64_t i = 0; i < 200; ++i) {
    a.push_back(sample_token(logits.data(), 6, sampling(1.0, 0, 42), i));
    b.push_back(sample_token(logits.data(), 6, sampling(1.0, 0, 42), i));
    c.push_back(sample_token(logits.data(), 6, sampling(1.0, 0, 43), i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Generate, FrequenciesFollowTheSoftmaxOfTheTopK) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f, 2.5f};
  const double temperature = 0.5;
  const int64_t k = 3;  // ids 1, 4, 3
  std::map<int64_t, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++counts[sample_token(logits.data(), 5, sampling(temperature, k, 9), i)];
  double total = 0;
  for (int64_t id : {1, 4, 3}) total += std::exp(logits[id] / temperature);
  EXPECT_EQ(counts.count(0) + counts.count(2), 0u) << "an id outside the top 3 was drawn";
  for (int64_t id : {1, 4, 3}) {
    const double expected = std::exp(logits[id] / temperature) / total;
    EXPECT_NEAR(counts[id] / static_cast<double>(draws), expected, 0.01) << "id " << id;
  }
}

TEST(Generate, ATinyTemperatureIsGreedyAndAHugeOneUniform) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, 0.9f};
  for (uint64_t i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits.data(), 4, sampling(1e-30, 0, 1), i), 1);
  std::map<int64_t, int> counts;
  for (uint64_t i = 0; i < 8000; ++i) ++counts[sample_token(logits.data(), 4, sampling(1e30, 0, 1), i)];
  for (int64_t id = 0; id < 4; ++id) EXPECT_NEAR(counts[id] / 8000.0, 0.25, 0.03) << "id " << id;
}

TEST(Generate, NonFiniteLogitsAreRefusedNamingTheToken) {
  const std::vector<float> logits = {0.0f, NAN, 1.0f};
  try {
    sample_token(logits.data(), 3, sampling(1.0), 5);
    FAIL() << "accepted a NaN logit";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("generated token 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("logit for token 1"), std::string::npos) << msg;
  }
}
