// Checks the RoPE layer's backward against finite differences of its forward on the host
// (mgtrain/gradient_check.hpp), as a plugin author checks a layer before training with it: no
// test framework, exit status 0 when every gradient agrees. Run: build/rope_gradients
#include <cstdio>
#include <random>

#include "mgtrain/gradient_check.hpp"
#include "rope.hpp"

int main() {
  mgt::Tensor x({2, 5, 8});  // [B, T, D]
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = uniform(gen);
  RopeLayer rope("rope1", 10000.0f, 5, 8);
  const mgt::GradientCheckReport report = mgt::check_layer_gradients(rope, x);
  std::printf("%s\n", report.summary.c_str());
  return report.passed ? 0 : 1;
}
