#include "datasets/mlm_masks.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "mgtrain/rng.hpp"

namespace mgt::data {

int64_t positions_per_window(int64_t context) {
  return std::clamp<int64_t>(std::llround(kMaskedFraction * static_cast<double>(context)), 1, context);
}

void mask_window(const MlmMasking& masking, int64_t epoch, int64_t sample, float* x, int32_t* y, int64_t context,
                 int32_t* order) {
  static const uint64_t purpose = rng::purpose_hash("data.mlm");
  static const uint64_t draws_purpose = rng::purpose_hash("data.mlm.draws");
  const uint64_t e = masking.same_every_epoch ? 0 : static_cast<uint64_t>(epoch);
  // One key per window, then a counter per chosen position: each position's three draws come
  // from one Philox block.
  const auto w = rng::philox(rng::make_key(masking.seed, purpose), e, static_cast<uint64_t>(sample));
  const uint64_t window_key = rng::make_key((static_cast<uint64_t>(w[0]) << 32) | w[1], draws_purpose);
  const int64_t k = positions_per_window(context);
  std::iota(order, order + context, 0);
  for (int64_t t = 0; t < context; ++t) y[t] = -1;
  for (int64_t i = 0; i < k; ++i) {
    const auto r = rng::philox(window_key, 0, static_cast<uint64_t>(i));
    // A partial Fisher-Yates shuffle: the first k of a uniform permutation, without repeats.
    const int64_t j = i + static_cast<int64_t>(r[0] % static_cast<uint32_t>(context - i));
    std::swap(order[i], order[j]);
    const int64_t pos = order[i];
    y[pos] = static_cast<int32_t>(x[pos]);
    const uint32_t kind = r[1] % 10;  // 0-7: the mask token, 8: a random token, 9: kept
    if (kind < 8)
      x[pos] = static_cast<float>(masking.mask_token);
    else if (kind == 8)
      x[pos] = static_cast<float>(r[2] % static_cast<uint32_t>(masking.vocab));
  }
}

}  // namespace mgt::data
