#pragma once
// Sums and e^x for the CPU kernels' plain loops, written so g++ -O3 vectorizes them and so that
// their bits depend on the lengths alone (not on the batch, the vector width or the clone picked).
#include <cstdint>
#include <cstring>

namespace mgt::kernels {

// Sums in kLanes interleaved partial sums combined in a fixed order: the compiler vectorizes the
// loop (a plain running sum it must keep in order), and the bits depend on the length alone.
constexpr int64_t kLanes = 16;

inline float combine(const float (&acc)[kLanes]) {
  float s = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

inline float lane_sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  for (int64_t l = 0; l < n - i; ++l) acc[l] += x[i + l];  // i is a multiple of kLanes
  return combine(acc);
}

inline float lane_dot(const float* x, const float* y, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += x[i + l] * y[i + l];
  for (int64_t l = 0; l < n - i; ++l) acc[l] += x[i + l] * y[i + l];
  return combine(acc);
}

// e^x for x in float's range, within 2 ulp, in operations the compiler vectorizes (libm's expf
// is a call per element): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial,
// 2^n put into the exponent bits. Below -87 it gives 2^-126 times e^r rather than denormals.
inline float exp_vectorizable(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace mgt::kernels
