// GPU optimizer updates against the built-in optimizer plugins (their real shared libraries from
// the build tree): the plugin's element update, compiled for the GPU from its own source (NVRTC),
// over several steps of SGD (plain, weight decay, momentum, Nesterov) and AdamW on random
// parameters and gradients, against the plugin's update on the host (apply_update); parameters and state
// buffers compared bit for bit after every step, and a set skip flag leaves everything as it was.
// Skipped without a device; the host-side checks of the same updates on the CPU backend run
// everywhere (tests/unit/test_optimizers.cpp).
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
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/device_buffer.hpp"
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

// The plugin on the host and its element update on the GPU, from the same start for kSteps steps.
// With `mask` (optimizer.weight_decay_on = matrices), both sides read it.
void expect_gpu_update_matches_plugin(const std::string& name, const std::string& ini, const std::vector<float>& start,
                                      const std::vector<std::vector<float>>& grads,
                                      const std::vector<uint8_t>& mask = {}) {
  auto host = make_plugin(name, ini);
  host->setup(kSize);
  if (!mask.empty()) host->set_decay_mask(mask);
  std::vector<float> p = start;
  auto gpu = mgt::cuda::make_cuda_backend(0);
  auto update = make_plugin(name, ini)->element_update();
  ASSERT_NE(update, nullptr) << ini;
  auto op = gpu->make_update(*update, false);
  DeviceBuffer<float> d_p(kSize), d_g(kSize), d_scalars(64);
  DeviceBuffer<int32_t> d_skip(1);
  DeviceBuffer<uint8_t> d_mask(mask.empty() ? 1 : mask.size());
  if (!mask.empty()) d_mask.upload(mask.data(), mask.size());
  const uint8_t* decayed = mask.empty() ? nullptr : d_mask.data();
  std::vector<DeviceBuffer<float>> d_state;
  std::vector<float*> state;
  for (int k = 0; k < update->states(); ++k) {
    d_state.emplace_back(kSize);
    state.push_back(d_state.back().data());
    const std::vector<float> zeros(kSize, 0.0f);
    d_state.back().upload(zeros.data(), kSize);
  }
  d_p.upload(start.data(), kSize);
  const int32_t no = 0, yes = 1;
  std::vector<unsigned char> scalars(update->scalars_bytes());
  for (int step = 0; step < kSteps; ++step) {
    host->apply_update(p.data(), grads[step].data(), kSize);
    d_g.upload(grads[step].data(), kSize);
    update->scalars(host->learning_rate(), step + 1, scalars.data());
    gpu->upload(d_scalars.data(), scalars.data(), scalars.size());
    d_skip.upload(&no, 1);
    op->run(d_p.data(), d_g.data(), state.data(), d_scalars.data(), kSize, decayed, d_skip.data());
    std::vector<float> got(kSize);
    d_p.download(got.data(), kSize);
    ASSERT_EQ(got, p) << ini << ": parameters differ after step " << step + 1;
    auto buffers = host->state_buffers();
    ASSERT_EQ(buffers.size(), state.size()) << ini;
    for (size_t k = 0; k < buffers.size(); ++k) {
      d_state[k].download(got.data(), kSize);
      ASSERT_EQ(got, std::vector<float>(buffers[k].data, buffers[k].data + kSize))
          << ini << ": " << buffers[k].name << " differs after step " << step + 1;
    }
  }
  // A non-finite gradient's step is skipped on the device: nothing changes.
  d_skip.upload(&yes, 1);
  op->run(d_p.data(), d_g.data(), state.data(), d_scalars.data(), kSize, decayed, d_skip.data());
  std::vector<float> got(kSize);
  d_p.download(got.data(), kSize);
  EXPECT_EQ(got, p) << ini << ": a skipped update changed the parameters";
}

TEST_F(GpuOptimizers, SgdMatchesPluginBitForBit) {
  for (const char* extra :
       {"", "weight_decay = 0.01\n", "momentum = 0.9\n", "momentum = 0.9\nnesterov = true\nweight_decay = 0.001\n"})
    expect_gpu_update_matches_plugin("sgd", std::string("[optimizer]\nlr = 0.05\n") + extra, params_, grads_);
}

TEST_F(GpuOptimizers, AdamWMatchesPluginBitForBit) {
  expect_gpu_update_matches_plugin("adam", "[optimizer]\nlr = 0.001\nweight_decay = 0.01\n", params_, grads_);
}

// optimizer.weight_decay_on = matrices: the kernel reads the mask as the plugin's loop does.
TEST_F(GpuOptimizers, DecayMaskMatchesPluginBitForBit) {
  std::vector<uint8_t> mask(kSize);
  for (size_t i = 0; i < kSize; ++i) mask[i] = (i / 7) % 2 == 0 ? 1 : 0;
  expect_gpu_update_matches_plugin("adam", "[optimizer]\nlr = 0.001\nweight_decay = 0.1\n", params_, grads_, mask);
  expect_gpu_update_matches_plugin("sgd", "[optimizer]\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.01\n", params_,
                                   grads_, mask);
}

}  // namespace
