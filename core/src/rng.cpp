#include "mgtrain/rng.hpp"

#include <numeric>

namespace mgt::rng {

uint64_t purpose_hash(std::string_view purpose) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : purpose) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t make_key(uint64_t seed, uint64_t purpose) {
  // splitmix64 of the pair, so nearby seeds and purposes give unrelated keys.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + purpose;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::array<uint32_t, 4> philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

static inline float to_unit(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);  // 24 bits: exact in float
}

float uniform(uint64_t key, uint64_t stream, uint64_t index) {
  const auto w = philox(key, stream, index / 4);
  return to_unit(w[index % 4]);
}

void fill_uniform(float* out, size_t n, float lo, float hi, uint64_t key, uint64_t stream,
                  uint64_t first_index) {
  const float span = hi - lo;
  size_t i = 0;
  uint64_t index = first_index;
  while (i < n) {
    const auto w = philox(key, stream, index / 4);
    for (uint64_t lane = index % 4; lane < 4 && i < n; ++lane, ++i, ++index)
      out[i] = lo + span * to_unit(w[lane]);
  }
}

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  const uint64_t key = make_key(seed, purpose_hash("sampler"));
  // Fisher-Yates from the top; draw j uniform in [0, i] with a 64-bit multiply-shift.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto w = philox(key, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

}  // namespace mgt::rng
