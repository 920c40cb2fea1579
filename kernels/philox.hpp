#pragma once
// Philox-4x32-10, the counter-based generator behind mgt::rng, inline for the host and for CUDA
// kernels alike: a dropout mask drawn on a GPU has the bits of one drawn on the CPU.
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define MGT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MGT_HOST_DEVICE inline
#endif

namespace mgt::kernels {

struct Philox4 {
  uint32_t w[4];
};

MGT_HOST_DEVICE Philox4 philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
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
  return {{c0, c1, c2, c3}};
}

// 24 random bits as a float in [0, 1): exact.
MGT_HOST_DEVICE float philox_unit(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// Element `index` of the stream (key, stream) as a uniform in [0, 1).
MGT_HOST_DEVICE float philox_uniform(uint64_t key, uint64_t stream, uint64_t index) {
  return philox_unit(philox(key, stream, index / 4).w[index % 4]);
}

// Elements first_index.. of the stream (key, stream) as uniforms in [0, 1): what mgt::rng and the
// CPU backend's Ops::uniform draw, and the CUDA kernel draws element by element.
inline void philox_fill_uniform(float* out, size_t n, uint64_t key, uint64_t stream, uint64_t first_index) {
  size_t i = 0;
  uint64_t index = first_index;
  while (i < n) {
    const Philox4 r = philox(key, stream, index / 4);
    for (uint64_t lane = index % 4; lane < 4 && i < n; ++lane, ++i, ++index) out[i] = philox_unit(r.w[lane]);
  }
}

}  // namespace mgt::kernels
