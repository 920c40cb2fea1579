// GPU optimizer updates against the built-in optimizer plugins (their real shared libraries from
// the build tree): several steps of SGD (plain, weight decay, momentum, Nesterov) and AdamW on
// random parameters and gradients; parameters and state buffers compared after every step. The
// *_device variants (scalars in device memory, a skip flag) against sgd_step and adamw_step, bit
// for bit. Skipped without a device, except the host-side scalar checks.
#include <gtest/gtest.h>

#include <boost/dll/shared_library.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/optimizers.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"

namespace {

using mgt::cuda::DeviceBuffer;
using mgt::test::expect_close;
using mgt::test::random_floats;

// Libraries stay loaded for the life of the test process, as in the core's loader. The build
// tree's plugins, or MGTRAIN_TEST_PLUGIN_DIR's where the binaries run elsewhere
// (scripts/device-check.sh).
std::unique_ptr<mgt::Optimizer> make_plugin(const std::string& name, const std::string& ini) {
  static std::map<std::string, boost::dll::shared_library> libs;
  auto it = libs.find(name);
  if (it == libs.end()) {
    const char* dir = std::getenv("MGTRAIN_TEST_PLUGIN_DIR");
    const std::string path = (dir && *dir ? std::string(dir) : std::string(MGTRAIN_BINARY_DIR) + "/plugins") +
                             "/libmgtrain-optimizer-" + name + ".so";
    it = libs.emplace(name, boost::dll::shared_library(path)).first;
  }
  const auto& d = it->second.get<const mgt::PluginDescriptor>(MGTRAIN_PLUGIN_SYMBOL);
  mgt::Config config = mgt::Config::from_string(ini, "test.ini");
  config.validate(std::vector<mgt::ConfigKey>(d.config_keys, d.config_keys + d.config_key_count));
  const mgt::ConfigSection section(config, "optimizer");
  return std::unique_ptr<mgt::Optimizer>(static_cast<mgt::Optimizer*>(d.create(&section)));
}

constexpr size_t kSize = 100003;  // not a multiple of any block size
constexpr int kSteps = 5;

class GpuOptimizers : public mgt::test::GpuTest {
 protected:
  // The same start and gradients for the plugin and the kernel; gradients differ by step.
  std::vector<float> params_ = random_floats(kSize, 11);
  std::vector<std::vector<float>> grads_ = [] {
    std::vector<std::vector<float>> g;
    for (int s = 0; s < kSteps; ++s) g.push_back(random_floats(kSize, 100 + s, -2.0f, 2.0f));
    return g;
  }();
};

struct SgdCase {
  std::string ini;
  mgt::cuda::SgdHyper hyper;
};

TEST_F(GpuOptimizers, SgdMatchesPlugin) {
  const std::vector<SgdCase> cases = {
      {"lr = 0.1\n", {0.1, 0.0, 0.0, false, 0}},
      {"lr = 0.05\nweight_decay = 0.01\n", {0.05, 0.0, 0.01, false, 0}},
      {"lr = 0.05\nmomentum = 0.9\n", {0.05, 0.9, 0.0, false, 0}},
      {"lr = 0.05\nmomentum = 0.9\nweight_decay = 0.001\n", {0.05, 0.9, 0.001, false, 0}},
      {"lr = 0.02\nmomentum = 0.8\nnesterov = true\nweight_decay = 0.01\n", {0.02, 0.8, 0.01, true, 0}},
  };
  for (const auto& c : cases) {
    auto plugin = make_plugin("sgd", "[optimizer]\n" + c.ini);
    plugin->setup(kSize);
    std::vector<float> p = params_;
    DeviceBuffer<float> d_p(params_), d_g(kSize), d_buf(kSize);
    d_buf.fill_zero();
    mgt::cuda::SgdHyper h = c.hyper;
    for (int s = 0; s < kSteps; ++s) {
      plugin->step(p.data(), grads_[s].data(), kSize);
      d_g.upload(grads_[s].data(), kSize);
      h.steps_done = s;
      mgt::cuda::sgd_step(d_p.data(), d_g.data(), h.momentum > 0 ? d_buf.data() : nullptr, kSize, h);
      const std::string what = "sgd [" + c.ini.substr(0, c.ini.size() - 1) + "] step " + std::to_string(s + 1);
      expect_close(d_p.to_host(), p, 1e-5, what + " params");
      const auto state = plugin->state_buffers();
      if (!state.empty())
        expect_close(d_buf.to_host(), std::vector<float>(state[0].data, state[0].data + kSize), 1e-5,
                     what + " momentum");
    }
  }
}

struct AdamCase {
  std::string ini;
  mgt::cuda::AdamWHyper hyper;
};

TEST_F(GpuOptimizers, AdamWMatchesPlugin) {
  const std::vector<AdamCase> cases = {
      {"lr = 0.001\n", {0.001, 0.9, 0.999, 1e-8, 0.0, 1}},
      {"lr = 0.01\nweight_decay = 0.05\n", {0.01, 0.9, 0.999, 1e-8, 0.05, 1}},
      {"lr = 0.003\nbeta1 = 0.8\nbeta2 = 0.95\neps = 1e-6\nweight_decay = 0.1\n",
       {0.003, 0.8, 0.95, 1e-6, 0.1, 1}},
  };
  for (const auto& c : cases) {
    auto plugin = make_plugin("adam", "[optimizer]\n" + c.ini);
    plugin->setup(kSize);
    std::vector<float> p = params_;
    DeviceBuffer<float> d_p(params_), d_g(kSize), d_m(kSize), d_v(kSize);
    d_m.fill_zero();
    d_v.fill_zero();
    mgt::cuda::AdamWHyper h = c.hyper;
    for (int s = 0; s < kSteps; ++s) {
      plugin->step(p.data(), grads_[s].data(), kSize);
      d_g.upload(grads_[s].data(), kSize);
      h.step = s + 1;
      mgt::cuda::adamw_step(d_p.data(), d_g.data(), d_m.data(), d_v.data(), kSize, h);
      const std::string what = "adamw [" + c.ini.substr(0, c.ini.size() - 1) + "] step " + std::to_string(s + 1);
      expect_close(d_p.to_host(), p, 1e-5, what + " params");
      const auto state = plugin->state_buffers();
      ASSERT_EQ(state.size(), 2u);
      expect_close(d_m.to_host(), std::vector<float>(state[0].data, state[0].data + kSize), 1e-5,
                   what + " exp_avg");
      expect_close(d_v.to_host(), std::vector<float>(state[1].data, state[1].data + kSize), 1e-5,
                   what + " exp_avg_sq");
    }
  }
}

TEST(OptimizerScalars, AreWorkedOutAsThePluginsDo) {
  mgt::cuda::SgdHyper h{0.05, 0.9, 0.01, false, 0};
  const auto first = mgt::cuda::sgd_scalars(h);
  EXPECT_EQ(first.lr, 0.05f);
  EXPECT_EQ(first.wd, 0.01f);
  EXPECT_EQ(first.mu, 0.9f);
  EXPECT_EQ(first.keep, 0.0f);  // the buffer becomes the first gradient
  h.steps_done = 1;
  EXPECT_EQ(mgt::cuda::sgd_scalars(h).keep, 0.9f);

  EXPECT_EQ(mgt::cuda::sgd_kind({0.1, 0.0, 0.0, false, 0}), mgt::cuda::SgdKind::plain);
  EXPECT_EQ(mgt::cuda::sgd_kind({0.1, 0.0, 0.01, false, 0}), mgt::cuda::SgdKind::weight_decay);
  EXPECT_EQ(mgt::cuda::sgd_kind({0.1, 0.9, 0.0, false, 0}), mgt::cuda::SgdKind::momentum);
  EXPECT_EQ(mgt::cuda::sgd_kind({0.1, 0.9, 0.01, true, 0}), mgt::cuda::SgdKind::nesterov);
  EXPECT_THROW(mgt::cuda::sgd_kind({0.1, 0.0, 0.0, true, 0}), mgt::Error);

  const mgt::cuda::AdamWHyper a{0.01, 0.9, 0.999, 1e-8, 0.05, 3};
  const auto s = mgt::cuda::adamw_scalars(a);
  EXPECT_EQ(s.decay, static_cast<float>(1.0 - 0.01 * 0.05));
  EXPECT_EQ(s.b1, 0.9f);
  EXPECT_EQ(s.b2, 0.999f);
  EXPECT_EQ(s.one_minus_b1, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(s.one_minus_b2, static_cast<float>(1.0 - 0.999));
  EXPECT_EQ(s.step_size, static_cast<float>(0.01 / (1.0 - std::pow(0.9, 3.0))));
  EXPECT_EQ(s.inv_sqrt_bc2, static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(0.999, 3.0))));
  EXPECT_EQ(s.eps, 1e-8f);
  EXPECT_THROW(mgt::cuda::adamw_scalars({0.01, 0.9, 0.999, 1e-8, 0.0, 0}), mgt::Error);
}

TEST_F(GpuOptimizers, SgdDeviceMatchesSgdStep) {
  const std::vector<mgt::cuda::SgdHyper> cases = {
      {0.1, 0.0, 0.0, false, 0},
      {0.05, 0.0, 0.01, false, 0},
      {0.05, 0.9, 0.001, false, 0},
      {0.02, 0.8, 0.01, true, 0},
  };
  for (const auto& c : cases) {
    const mgt::cuda::SgdKind kind = mgt::cuda::sgd_kind(c);
    const bool momentum = c.momentum > 0;
    DeviceBuffer<float> d_p(params_), d_buf(kSize), d_p2(params_), d_buf2(kSize), d_g(kSize);
    d_buf.fill_zero();
    d_buf2.fill_zero();
    DeviceBuffer<mgt::cuda::SgdScalars> d_scalars(1);
    DeviceBuffer<int32_t> d_skip(std::vector<int32_t>{0});
    mgt::cuda::SgdHyper h = c;
    for (int s = 0; s < kSteps; ++s) {
      d_g.upload(grads_[s].data(), kSize);
      h.steps_done = s;
      mgt::cuda::sgd_step(d_p.data(), d_g.data(), momentum ? d_buf.data() : nullptr, kSize, h);
      const mgt::cuda::SgdScalars scalars = mgt::cuda::sgd_scalars(h);
      d_scalars.upload(&scalars, 1);
      // Every other step without a skip flag at all, the rest with a clear one.
      mgt::cuda::sgd_step_device(d_p2.data(), d_g.data(), momentum ? d_buf2.data() : nullptr,
                                 kSize, kind, d_scalars.data(), s % 2 ? d_skip.data() : nullptr);
      mgt::cuda::synchronize();
      const std::string what = "sgd lr " + std::to_string(c.lr) + " momentum " +
                               std::to_string(c.momentum) + " step " + std::to_string(s + 1);
      EXPECT_EQ(d_p2.to_host(), d_p.to_host()) << what << " params";
      if (momentum) {
        EXPECT_EQ(d_buf2.to_host(), d_buf.to_host()) << what << " momentum";
      }
    }

    // A set skip flag leaves parameters and buffer as they were, whatever the gradient.
    const auto p_before = d_p2.to_host(), buf_before = d_buf2.to_host();
    d_g.upload(std::vector<float>(kSize, std::numeric_limits<float>::quiet_NaN()).data(), kSize);
    d_skip.upload(std::vector<int32_t>{1}.data(), 1);
    mgt::cuda::sgd_step_device(d_p2.data(), d_g.data(), momentum ? d_buf2.data() : nullptr, kSize,
                               kind, d_scalars.data(), d_skip.data());
    mgt::cuda::synchronize();
    EXPECT_EQ(d_p2.to_host(), p_before) << "sgd skipped step, lr " << c.lr;
    EXPECT_EQ(d_buf2.to_host(), buf_before) << "sgd skipped step, lr " << c.lr;
    // The same call with the flag clear does update.
    d_g.upload(grads_[0].data(), kSize);
    d_skip.fill_zero();
    mgt::cuda::sgd_step_device(d_p2.data(), d_g.data(), momentum ? d_buf2.data() : nullptr, kSize,
                               kind, d_scalars.data(), d_skip.data());
    mgt::cuda::synchronize();
    EXPECT_NE(d_p2.to_host(), p_before) << "sgd step after the skip, lr " << c.lr;
  }
}

TEST_F(GpuOptimizers, AdamWDeviceMatchesAdamWStep) {
  const std::vector<mgt::cuda::AdamWHyper> cases = {
      {0.001, 0.9, 0.999, 1e-8, 0.0, 1},
      {0.003, 0.8, 0.95, 1e-6, 0.1, 1},
  };
  for (const auto& c : cases) {
    DeviceBuffer<float> d_p(params_), d_m(kSize), d_v(kSize), d_p2(params_), d_m2(kSize),
        d_v2(kSize), d_g(kSize);
    d_m.fill_zero();
    d_v.fill_zero();
    d_m2.fill_zero();
    d_v2.fill_zero();
    DeviceBuffer<mgt::cuda::AdamWScalars> d_scalars(1);
    DeviceBuffer<int32_t> d_skip(std::vector<int32_t>{0});
    mgt::cuda::AdamWHyper h = c;
    for (int s = 0; s < kSteps; ++s) {
      d_g.upload(grads_[s].data(), kSize);
      h.step = s + 1;
      mgt::cuda::adamw_step(d_p.data(), d_g.data(), d_m.data(), d_v.data(), kSize, h);
      const mgt::cuda::AdamWScalars scalars = mgt::cuda::adamw_scalars(h);
      d_scalars.upload(&scalars, 1);
      mgt::cuda::adamw_step_device(d_p2.data(), d_g.data(), d_m2.data(), d_v2.data(), kSize,
                                   d_scalars.data(), s % 2 ? d_skip.data() : nullptr);
      mgt::cuda::synchronize();
      const std::string what = "adamw lr " + std::to_string(c.lr) + " step " + std::to_string(s + 1);
      EXPECT_EQ(d_p2.to_host(), d_p.to_host()) << what << " params";
      EXPECT_EQ(d_m2.to_host(), d_m.to_host()) << what << " exp_avg";
      EXPECT_EQ(d_v2.to_host(), d_v.to_host()) << what << " exp_avg_sq";
    }

    const auto p_before = d_p2.to_host(), m_before = d_m2.to_host(), v_before = d_v2.to_host();
    d_g.upload(std::vector<float>(kSize, std::numeric_limits<float>::infinity()).data(), kSize);
    d_skip.upload(std::vector<int32_t>{1}.data(), 1);
    mgt::cuda::adamw_step_device(d_p2.data(), d_g.data(), d_m2.data(), d_v2.data(), kSize,
                                 d_scalars.data(), d_skip.data());
    mgt::cuda::synchronize();
    EXPECT_EQ(d_p2.to_host(), p_before) << "adamw skipped step, lr " << c.lr;
    EXPECT_EQ(d_m2.to_host(), m_before) << "adamw skipped step, lr " << c.lr;
    EXPECT_EQ(d_v2.to_host(), v_before) << "adamw skipped step, lr " << c.lr;
    d_g.upload(grads_[0].data(), kSize);
    d_skip.fill_zero();
    mgt::cuda::adamw_step_device(d_p2.data(), d_g.data(), d_m2.data(), d_v2.data(), kSize,
                                 d_scalars.data(), d_skip.data());
    mgt::cuda::synchronize();
    EXPECT_NE(d_p2.to_host(), p_before) << "adamw step after the skip, lr " << c.lr;
  }
}

}  // namespace
