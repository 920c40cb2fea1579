// The built-in optimizer plugins, loaded from their real shared libraries in the build tree, checked
// against updates worked out by hand (PyTorch's torch.optim.SGD / AdamW semantics).
#include <gtest/gtest.h>

#include <boost/dll/shared_library.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"

namespace {

// Libraries stay loaded for the life of the test process, as in the core's loader.
const mgt::PluginDescriptor& descriptor(const std::string& name) {
  static std::map<std::string, boost::dll::shared_library> libs;
  auto it = libs.find(name);
  if (it == libs.end()) {
    const std::string path = std::string(MGTRAIN_BINARY_DIR) + "/plugins/libmgtrain-optimizer-" + name + ".so";
    it = libs.emplace(name, boost::dll::shared_library(path)).first;
  }
  return it->second.get<const mgt::PluginDescriptor>(MGTRAIN_PLUGIN_SYMBOL);
}

// Validates `ini` against the plugin's own keys (filling defaults) and creates the optimizer.
std::unique_ptr<mgt::Optimizer> make(const std::string& name, const std::string& ini) {
  const auto& d = descriptor(name);
  mgt::Config config = mgt::Config::from_string(ini, "test.ini");
  config.validate(std::vector<mgt::ConfigKey>(d.config_keys, d.config_keys + d.config_key_count));
  const mgt::ConfigSection section(config, "optimizer");
  return std::unique_ptr<mgt::Optimizer>(static_cast<mgt::Optimizer*>(d.create(&section)));
}

// The same three parameters and three gradients drive every case.
const std::vector<float> kP0 = {1.0f, -2.0f, 0.5f};
const std::vector<std::vector<float>> kGrads = {{0.5f, 1.0f, -1.0f}, {0.25f, -0.5f, 2.0f}, {1.0f, 0.0f, 0.5f}};

// Runs `steps` updates and returns the parameters after each one.
std::vector<std::vector<float>> run(mgt::Optimizer& opt, int steps) {
  std::vector<float> p = kP0;
  opt.setup(p.size());
  std::vector<std::vector<float>> out;
  for (int s = 0; s < steps; ++s) {
    opt.apply_update(p.data(), kGrads[s].data(), p.size());
    out.push_back(p);
  }
  return out;
}

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 2e-6) << what << " element " << i;
}

template <typename F>
std::string config_error_message(F&& f) {
  try {
    f();
  } catch (const mgt::ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected mgt::ConfigError";
  return {};
}

TEST(OptimizerPlugin, DescriptorsMatchTheAbi) {
  for (const std::string name : {"sgd", "adam"}) {
    const auto& d = descriptor(name);
    EXPECT_EQ(d.abi_version, MGTRAIN_PLUGIN_ABI_VERSION) << name;
    EXPECT_STREQ(d.kind, "optimizer") << name;
    EXPECT_EQ(std::string(d.name), name);
    EXPECT_STREQ(d.version, "1.0.0") << name;
    EXPECT_STREQ(d.build_fingerprint, MGT_BUILD_FINGERPRINT) << name;
    ASSERT_NE(d.description, nullptr);
    EXPECT_GT(std::string(d.description).size(), 0u);
    EXPECT_EQ(std::string(d.description).find('\n'), std::string::npos) << "one line";
    ASSERT_GT(d.config_key_count, 0u);
    for (size_t i = 0; i < d.config_key_count; ++i) {
      EXPECT_EQ(std::string(d.config_keys[i].key).rfind("optimizer.", 0), 0u) << d.config_keys[i].key;
      EXPECT_NE(d.config_keys[i].default_value, nullptr) << d.config_keys[i].key;
      EXPECT_NE(d.config_keys[i].help, nullptr) << d.config_keys[i].key;
    }
    EXPECT_NE(d.create, nullptr);
  }
}

TEST(OptimizerPlugin, DefaultsFillFromKeyTable) {
  EXPECT_DOUBLE_EQ(make("sgd", "")->learning_rate(), 0.01);
  EXPECT_DOUBLE_EQ(make("adam", "")->learning_rate(), 0.001);
}

TEST(OptimizerSgd, PlainUpdate) {
  auto opt = make("sgd", "[optimizer]\nlr = 0.1\n");
  const auto p = run(*opt, 3);
  // p -= 0.1 * g:
  // 1: [1 - 0.05, -2 - 0.1, 0.5 + 0.1]          = [0.95, -2.1, 0.6]
  // 2: [0.95 - 0.025, -2.1 + 0.05, 0.6 - 0.2]   = [0.925, -2.05, 0.4]
  // 3: [0.925 - 0.1, -2.05 - 0, 0.4 - 0.05]     = [0.825, -2.05, 0.35]
  expect_near(p[0], {0.95, -2.1, 0.6}, "step 1");
  expect_near(p[1], {0.925, -2.05, 0.4}, "step 2");
  expect_near(p[2], {0.825, -2.05, 0.35}, "step 3");
  EXPECT_EQ(opt->step_count(), 3);
  EXPECT_TRUE(opt->state_buffers().empty());
}

TEST(OptimizerSgd, Momentum) {
  auto opt = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n");
  const auto p = run(*opt, 3);
  // buf1 = g1 (PyTorch: no decay on the first step) = [0.5, 1, -1]; p1 = [0.95, -2.1, 0.6]
  // buf2 = 0.9 buf1 + g2 = [0.45 + 0.25, 0.9 - 0.5, -0.9 + 2] = [0.7, 0.4, 1.1]
  //   p2 = p1 - 0.1 buf2 = [0.88, -2.14, 0.49]
  // buf3 = 0.9 buf2 + g3 = [0.63 + 1, 0.36 + 0, 0.99 + 0.5] = [1.63, 0.36, 1.49]
  //   p3 = p2 - 0.1 buf3 = [0.717, -2.176, 0.341]
  expect_near(p[0], {0.95, -2.1, 0.6}, "step 1");
  expect_near(p[1], {0.88, -2.14, 0.49}, "step 2");
  expect_near(p[2], {0.717, -2.176, 0.341}, "step 3");
  const auto buffers = opt->state_buffers();
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].name, "momentum");
  expect_near(std::vector<float>(buffers[0].data, buffers[0].data + 3), {1.63, 0.36, 1.49}, "buf3");
  EXPECT_EQ(opt->step_count(), 3);
}

TEST(OptimizerSgd, Nesterov) {
  auto opt = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\nnesterov = true\n");
  const auto p = run(*opt, 2);
  // buf1 = g1 = [0.5, 1, -1]; d1 = g1 + 0.9 buf1 = [0.95, 1.9, -1.9]
  //   p1 = [1 - 0.095, -2 - 0.19, 0.5 + 0.19] = [0.905, -2.19, 0.69]
  // buf2 = [0.7, 0.4, 1.1]; d2 = g2 + 0.9 buf2 = [0.25 + 0.63, -0.5 + 0.36, 2 + 0.99]
  //   = [0.88, -0.14, 2.99]; p2 = [0.905 - 0.088, -2.19 + 0.014, 0.69 - 0.299]
  expect_near(p[0], {0.905, -2.19, 0.69}, "step 1");
  expect_near(p[1], {0.817, -2.176, 0.391}, "step 2");
}

TEST(OptimizerSgd, WeightDecay) {
  auto opt = make("sgd", "[optimizer]\nlr = 0.1\nweight_decay = 0.1\n");
  const auto p = run(*opt, 2);
  // g1' = g1 + 0.1 p0 = [0.5 + 0.1, 1 - 0.2, -1 + 0.05] = [0.6, 0.8, -0.95]
  //   p1 = [1 - 0.06, -2 - 0.08, 0.5 + 0.095] = [0.94, -2.08, 0.595]
  // g2' = g2 + 0.1 p1 = [0.25 + 0.094, -0.5 - 0.208, 2 + 0.0595] = [0.344, -0.708, 2.0595]
  //   p2 = [0.94 - 0.0344, -2.08 + 0.0708, 0.595 - 0.20595] = [0.9056, -2.0092, 0.38905]
  expect_near(p[0], {0.94, -2.08, 0.595}, "step 1");
  expect_near(p[1], {0.9056, -2.0092, 0.38905}, "step 2");
}

TEST(OptimizerSgd, MomentumWithWeightDecay) {
  auto opt = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\nweight_decay = 0.1\n");
  const auto p = run(*opt, 2);
  // buf1 = g1' = [0.6, 0.8, -0.95]; p1 = [0.94, -2.08, 0.595]
  // g2' = [0.344, -0.708, 2.0595]; buf2 = 0.9 buf1 + g2' = [0.884, 0.012, 1.2045]
  //   p2 = p1 - 0.1 buf2 = [0.8516, -2.0812, 0.47455]
  expect_near(p[1], {0.8516, -2.0812, 0.47455}, "step 2");
}

TEST(OptimizerSgd, ResumedStepCountKeepsMomentumBuffer) {
  // A restored run (step_count > 0, buffer loaded) must not treat its next step as the first.
  auto opt = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n");
  std::vector<float> p = kP0;
  opt->setup(p.size());
  float* buf = opt->state_buffers().at(0).data;
  buf[0] = 0.5f;
  buf[1] = 1.0f;
  buf[2] = -1.0f;  // buf1 from the Momentum case
  opt->set_step_count(1);
  p = {0.95f, -2.1f, 0.6f};  // p1 from the Momentum case
  opt->apply_update(p.data(), kGrads[1].data(), p.size());
  expect_near(p, {0.88, -2.14, 0.49}, "step 2 after resume");
}

TEST(OptimizerSgd, NesterovWithoutMomentumIsConfigError) {
  const std::string msg = config_error_message([] { make("sgd", "[optimizer]\nnesterov = true\n"); });
  EXPECT_NE(msg.find("optimizer.nesterov"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer.momentum"), std::string::npos) << msg;
}

TEST(OptimizerSgd, NonPositiveLearningRateRejectedByValidation) {
  const std::string msg = config_error_message([] { make("sgd", "[optimizer]\nlr = 0\n"); });
  EXPECT_NE(msg.find("optimizer.lr"), std::string::npos) << msg;
  config_error_message([] { make("sgd", "[optimizer]\nlr = fast\n"); });
  config_error_message([] { make("sgd", "[optimizer]\nmomentum = -0.5\n"); });
}

TEST(OptimizerAdam, AdamW) {
  auto opt = make("adam", "[optimizer]\nlr = 0.1\n");  // beta1 0.9, beta2 0.999, eps 1e-8
  const auto p = run(*opt, 3);
  // Step 1: m = 0.1 g, v = 0.001 g^2, mhat = g, vhat = g^2: the step is lr * sign(g) (eps
  //   changes it by ~1e-9): p1 = [0.9, -2.1, 0.6].
  // Step 2, element 0: m = 0.9*0.05 + 0.1*0.25 = 0.07; v = 0.999*0.00025 + 0.001*0.0625
  //   = 0.00031225; mhat = 0.07 / (1 - 0.81) = 0.368421053; vhat = 0.00031225 / 0.001999
  //   = 0.156203102, sqrt 0.395225382; p = 0.9 - 0.1 * 0.932180... = 0.806782040.
  //   Element 1: m = 0.09 - 0.05 = 0.04, v = 0.000999 + 0.00025 = 0.001249 -> -2.126633703.
  //   Element 2: m = -0.09 + 0.2 = 0.11, v = 0.000999 + 0.004 = 0.004999 -> 0.563389647.
  // Step 3 the same way (bc1 = 0.271, bc2 = 0.002997001): m = [0.163, 0.036, 0.149],
  //   v = [0.00131193775, 0.001247751, 0.005244001] -> [0.715873406, -2.147221633, 0.521824527].
  expect_near(p[0], {0.9, -2.1, 0.6}, "step 1");
  expect_near(p[1], {0.806782040, -2.126633703, 0.563389647}, "step 2");
  expect_near(p[2], {0.715873406, -2.147221633, 0.521824527}, "step 3");
  EXPECT_EQ(opt->step_count(), 3);
  const auto buffers = opt->state_buffers();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].name, "exp_avg");
  EXPECT_EQ(buffers[1].name, "exp_avg_sq");
  expect_near(std::vector<float>(buffers[0].data, buffers[0].data + 3), {0.163, 0.036, 0.149}, "m3");
  for (int i = 0; i < 3; ++i) {
    const double v3[] = {0.00131193775, 0.001247751, 0.005244001};
    EXPECT_NEAR(buffers[1].data[i], v3[i], 1e-9) << "v3 element " << i;
  }
}

TEST(OptimizerAdam, AdamWDecoupledWeightDecay) {
  auto opt = make("adam", "[optimizer]\nlr = 0.1\nweight_decay = 0.1\n");
  const auto p = run(*opt, 3);
  // The decay multiplies p by 1 - lr*wd = 0.99 before the Adam step, and m, v are as without it:
  // p1 = 0.99 p0 - 0.1 sign(g1) = [0.99 - 0.1, -1.98 - 0.1, 0.495 + 0.1] = [0.89, -2.08, 0.595]
  // p2 = 0.99 p1 - (adam step 2 above: [0.0932180, 0.0266337, 0.0366104])
  //    = [0.8811 - 0.0932180, -2.0592 - 0.0266337, 0.58905 - 0.0366104]
  // p3 = 0.99 p2 - (adam step 3: [0.0909086, 0.0205879, 0.0415651])
  expect_near(p[0], {0.89, -2.08, 0.595}, "step 1");
  expect_near(p[1], {0.787882040, -2.085833703, 0.552439647}, "step 2");
  expect_near(p[2], {0.689094585, -2.085563296, 0.505350130}, "step 3");
}

TEST(OptimizerAdam, BetaOutOfRangeIsConfigError) {
  std::string msg = config_error_message([] { make("adam", "[optimizer]\nbeta1 = 1.0\n"); });
  EXPECT_NE(msg.find("optimizer.beta1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[0, 1)"), std::string::npos) << msg;
  msg = config_error_message([] { make("adam", "[optimizer]\nbeta2 = 1.5\n"); });
  EXPECT_NE(msg.find("optimizer.beta2"), std::string::npos) << msg;
}

TEST(OptimizerAdam, SgdKeysAreNotAdamKeys) {
  // Each plugin declares only its own keys in the shared [optimizer] section.
  config_error_message([] { make("adam", "[optimizer]\nmomentum = 0.9\n"); });
}

// The element update a plugin states once (Optimizer::element_update), run by the CPU backend as
// the compiled step runs it, against the host's update (apply_update, from the same rule): the same
// bits, the same state, and a set skip flag changes nothing. With a decay mask
// (optimizer.weight_decay_on = matrices) as without: both sides read it.
TEST(OptimizerElementUpdate, CpuBackendRunsThePluginsUpdateBitForBit) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sgd", "[optimizer]\nlr = 0.1\n"},
      {"sgd", "[optimizer]\nlr = 0.1\nweight_decay = 0.01\n"},
      {"sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n"},
      {"sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\nnesterov = true\nweight_decay = 0.001\n"},
      {"adam", "[optimizer]\nlr = 0.01\nweight_decay = 0.1\n"}};
  auto backend = mgt::kernels::make_cpu_backend();
  const std::vector<uint8_t> mask = {1, 0, 1};
  for (const bool masked : {false, true}) {
    for (const auto& [name, ini] : cases) {
      auto host = make(name, ini);
      auto update = make(name, ini)->element_update();
      ASSERT_NE(update, nullptr) << ini;
      auto op = backend->make_update(*update, false);
      std::vector<float> p = kP0, q = kP0;
      host->setup(p.size());
      if (masked) host->set_decay_mask(mask);
      const uint8_t* decayed = masked ? mask.data() : nullptr;
      std::vector<std::vector<float>> state(update->states(), std::vector<float>(q.size(), 0.0f));
      std::vector<float*> state_ptrs;
      for (auto& b : state) state_ptrs.push_back(b.data());
      std::vector<unsigned char> scalars(update->scalars_bytes());
      const int32_t no = 0, yes = 1;
      for (int step = 0; step < 3; ++step) {
        host->apply_update(p.data(), kGrads[step].data(), p.size());
        update->scalars(host->learning_rate(), step + 1, scalars.data());
        op->run(q.data(), kGrads[step].data(), state_ptrs.data(), scalars.data(), q.size(), decayed, &no);
        ASSERT_EQ(q, p) << ini << " step " << step + 1 << (masked ? " (masked)" : "");
        const auto buffers = host->state_buffers();
        ASSERT_EQ(buffers.size(), state.size()) << ini;
        for (size_t k = 0; k < buffers.size(); ++k)
          EXPECT_EQ(state[k], std::vector<float>(buffers[k].data, buffers[k].data + p.size())) << ini;
      }
      op->run(q.data(), kGrads[0].data(), state_ptrs.data(), scalars.data(), q.size(), decayed, &yes);
      EXPECT_EQ(q, p) << ini << ": a skipped update changed the parameters";
      // The device's source holds the same text as the host's loop.
      EXPECT_NE(update->device_source().find("mgt_apply"), std::string::npos);
    }
  }
}

// optimizer.weight_decay_on = matrices: with a zero gradient AdamW moves a parameter by its weight
// decay alone, so the masked-in elements shrink by 1 - lr * weight_decay and the others stay; SGD's
// L2 term likewise. Without a mask every element decays.
TEST(OptimizerElementUpdate, DecayMaskSparesTheElementsItLeavesOut) {
  for (const auto& [name, ini] :
       std::vector<std::pair<std::string, std::string>>{{"adam", "[optimizer]\nlr = 0.1\nweight_decay = 0.5\n"},
                                                        {"sgd", "[optimizer]\nlr = 0.1\nweight_decay = 0.5\n"}}) {
    const std::vector<float> zeros(kP0.size(), 0.0f);
    auto all = make(name, ini), some = make(name, ini);
    all->setup(kP0.size());
    some->setup(kP0.size());
    some->set_decay_mask({1, 0, 0});
    std::vector<float> p_all = kP0, p_some = kP0;
    all->apply_update(p_all.data(), zeros.data(), kP0.size());
    some->apply_update(p_some.data(), zeros.data(), kP0.size());
    const float shrink = 1.0f - 0.1f * 0.5f;
    for (size_t i = 0; i < kP0.size(); ++i) EXPECT_FLOAT_EQ(p_all[i], kP0[i] * shrink) << name << " element " << i;
    EXPECT_FLOAT_EQ(p_some[0], kP0[0] * shrink) << name;
    EXPECT_EQ(p_some[1], kP0[1]) << name << ": an element outside the mask decayed";
    EXPECT_EQ(p_some[2], kP0[2]) << name << ": an element outside the mask decayed";
  }
}

// The update for a node's shared parameters (a block at a time, the lines ahead evicted from the
// caches) against the plain one: the same bits, over several blocks, from a start that is not on a
// cache line, with a last block cut short; a skipped step writes nothing, nor does any step before
// the first parameter.
TEST(OptimizerElementUpdate, SharedParametersUpdateHasTheBitsOfThePlainOne) {
  constexpr size_t kSize = 5003, kOffset = 3;  // 1024-float blocks: four whole and a short one
  auto backend = mgt::kernels::make_cpu_backend();
  for (const auto& [name, ini] : std::vector<std::pair<std::string, std::string>>{
           {"sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\nweight_decay = 0.001\n"},
           {"adam", "[optimizer]\nlr = 0.01\nweight_decay = 0.1\n"}}) {
    auto host = make(name, ini);
    auto update = make(name, ini)->element_update();
    ASSERT_NE(update, nullptr) << ini;
    auto plain = backend->make_update(*update, false);
    auto shared = backend->make_update(*update, true);
    std::mt19937 random(7);
    std::normal_distribution<float> normal;
    std::vector<float> start(kSize), grads(kSize);
    for (auto& v : start) v = normal(random);
    std::vector<float> p = start, q_storage(kSize + kOffset, 0.0f);
    float* q = q_storage.data() + kOffset;
    std::copy(start.begin(), start.end(), q);
    using States = std::vector<std::vector<float>>;
    States p_state(update->states(), std::vector<float>(kSize)), q_state = p_state;
    auto pointers = [](States& states) {
      std::vector<float*> out;
      for (auto& s : states) out.push_back(s.data());
      return out;
    };
    auto p_ptrs = pointers(p_state), q_ptrs = pointers(q_state);
    std::vector<unsigned char> scalars(update->scalars_bytes());
    const int32_t no = 0, yes = 1;
    for (int step = 0; step < 3; ++step) {
      for (auto& g : grads) g = normal(random);
      update->scalars(host->learning_rate(), step + 1, scalars.data());
      plain->run(p.data(), grads.data(), p_ptrs.data(), scalars.data(), kSize, nullptr, &no);
      shared->run(q, grads.data(), q_ptrs.data(), scalars.data(), kSize, nullptr, &no);
      ASSERT_EQ(std::vector<float>(q, q + kSize), p) << ini << " step " << step + 1;
      ASSERT_EQ(q_state, p_state) << ini << " step " << step + 1;
    }
    EXPECT_NE(p, start) << ini << ": the update changed nothing, so the comparison proves nothing";
    shared->run(q, grads.data(), q_ptrs.data(), scalars.data(), kSize, nullptr, &yes);
    EXPECT_EQ(std::vector<float>(q, q + kSize), p) << ini << ": a skipped update changed the parameters";
    EXPECT_EQ(std::vector<float>(q_storage.begin(), q_storage.begin() + kOffset), std::vector<float>(kOffset, 0.0f))
        << ini << ": the update wrote before its first parameter";
  }
}

// The SDK's default step() runs the element update: an optimizer that gives neither it nor a
// step() of its own, or whose state buffers are not the update's, is refused by name on its first
// step.
class NoUpdate final : public mgt::Optimizer {
 public:
  explicit NoUpdate(int states) : states_(states) {}
  void setup(size_t size) override { state_.assign(size, 0.0f); }
  double learning_rate() const override { return 0.1; }
  void set_learning_rate(double) override {}
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    if (states_ == 0) return {};
    return {{"momentum", state_.data()}};
  }
  std::unique_ptr<mgt::ElementwiseUpdate> element_update() const override {
    if (states_ < 0) return nullptr;
    return make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n")->element_update();
  }

 private:
  int states_;
  std::vector<float> state_;
};

TEST(OptimizerDefaultStep, NeedsAnElementUpdateWithTheSameStateBuffers) {
  std::vector<float> p = kP0;
  NoUpdate none(-1), mismatched(0), fine(1);
  for (mgt::Optimizer* o : {static_cast<mgt::Optimizer*>(&none), static_cast<mgt::Optimizer*>(&mismatched),
                            static_cast<mgt::Optimizer*>(&fine)})
    o->setup(p.size());
  try {
    none.step(p.data(), kGrads[0].data(), p.size());
    ADD_FAILURE() << "no error";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither step() nor element_update()"), std::string::npos) << e.what();
  }
  try {
    mismatched.step(p.data(), kGrads[0].data(), p.size());
    ADD_FAILURE() << "no error";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reads 1 state buffers, state_buffers() lists 0"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(p, kP0) << "a refused step changed the parameters";
  fine.step(p.data(), kGrads[0].data(), p.size());
  EXPECT_EQ(fine.step_count(), 1);
  expect_near(p, {0.95, -2.1, 0.6}, "step 1");  // the first momentum step is the plain one
}

// An optimizer that overrides step() with an update of its own (every parameter set to 42) and
// may have sgd's element update as well.
class OwnStep final : public mgt::Optimizer {
 public:
  explicit OwnStep(bool has_element_update) : has_element_update_(has_element_update) {}
  void setup(size_t size) override { momentum_.assign(size, 0.0f); }
  void step(float* params, const float*, size_t size) override {
    ++step_count_;
    for (size_t i = 0; i < size; ++i) params[i] = 42.0f;
  }
  double learning_rate() const override { return 0.1; }
  void set_learning_rate(double) override {}
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override { return {{"momentum", momentum_.data()}}; }
  std::unique_ptr<mgt::ElementwiseUpdate> element_update() const override {
    if (!has_element_update_) return nullptr;
    return make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n")->element_update();
  }

 private:
  bool has_element_update_;
  std::vector<float> momentum_;
};

// apply_update(), the host's one entry point, runs the element update where there is one, so an
// optimizer's step() that states another update is never run; without one it runs step().
TEST(OptimizerApplyUpdate, RunsTheElementUpdateAndStepOnlyWithoutOne) {
  auto sgd = make("sgd", "[optimizer]\nlr = 0.1\nmomentum = 0.9\n");
  OwnStep both(true), step_alone(false);
  std::vector<float> p_sgd = kP0, p_both = kP0, p_step = kP0;
  sgd->setup(kP0.size());
  both.setup(kP0.size());
  step_alone.setup(kP0.size());
  for (int s = 0; s < 3; ++s) {
    sgd->apply_update(p_sgd.data(), kGrads[s].data(), kP0.size());
    both.apply_update(p_both.data(), kGrads[s].data(), kP0.size());
    step_alone.apply_update(p_step.data(), kGrads[s].data(), kP0.size());
    EXPECT_EQ(p_both, p_sgd) << "update " << s + 1 << ": not the element update's bits";
  }
  EXPECT_EQ(both.step_count(), 3);
  EXPECT_EQ(p_step, std::vector<float>(kP0.size(), 42.0f)) << "without an element update, step() is the update";
  EXPECT_EQ(step_alone.step_count(), 3);
}

}  // namespace
