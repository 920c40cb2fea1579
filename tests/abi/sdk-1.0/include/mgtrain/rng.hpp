#pragma once
// Counter-based randomness (Philox-4x32-10). A value is a pure function of (seed, purpose, index):
// no hidden state, nothing that depends on the rank or the world size, so a parameter's
// initialisation, a dropout mask or an epoch's permutation is the same on every run and layout.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "mgtrain/export.hpp"

namespace mgt::rng {

// Stable 64-bit hash of a purpose string (FNV-1a), e.g. a parameter's canonical name.
MGT_API uint64_t purpose_hash(std::string_view purpose);

// Four 32-bit words for one 128-bit counter under a 64-bit key.
MGT_API std::array<uint32_t, 4> philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// Key for (seed, purpose).
MGT_API uint64_t make_key(uint64_t seed, uint64_t purpose);

// Uniform float in [0, 1) for element `index` of the stream (key, stream).
MGT_API float uniform(uint64_t key, uint64_t stream, uint64_t index);

// Fills out[i] = uniform in [lo, hi) for i in [0, n), elements first_index.. of the stream.
MGT_API void fill_uniform(float* out, size_t n, float lo, float hi, uint64_t key, uint64_t stream,
                          uint64_t first_index = 0);

// The epoch's permutation of [0, n): a pure function of (seed, epoch).
MGT_API std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

}  // namespace mgt::rng
