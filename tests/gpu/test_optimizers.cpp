// GPU optimizer updates against the built-in optimizer plugins (their real shared libraries from
// the build tree): several steps of SGD (plain, weight decay, momentum, Nesterov) and AdamW on
// random parameters and gradients; parameters and state buffers compared after every step.
// Skipped without a device.
#include <gtest/gtest.h>

#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/optimizers.hpp"
#include "mgtrain/config.hpp"
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

}  // namespace
