#include "mgtrain/rng.hpp"

#include <numeric>

#include "kernels/philox.hpp"

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
  const kernels::Philox4 r = kernels::philox(key, counter_hi, counter_lo);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
}

float uniform(uint64_t key, uint64_t stream, uint64_t index) { return kernels::philox_uniform(key, stream, index); }

void fill_uniform(float* out, size_t n, float lo, float hi, uint64_t key, uint64_t stream, uint64_t first_index) {
  kernels::philox_fill_uniform(out, n, key, stream, first_index);
  // lo + span * u: exactly u for [0, 1).
  const float span = hi - lo;
  for (size_t i = 0; i < n; ++i) out[i] = lo + span * out[i];
}

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  const uint64_t key = make_key(seed, purpose_hash("sampler"));
  // Fisher-Yates from the top; draw j uniform in [0, i] with a 64-bit multiply-shift.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto w = philox(key, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

}  // namespace mgt::rng
