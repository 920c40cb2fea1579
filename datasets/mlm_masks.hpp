#pragma once
// Masked-language-model inputs (BERT's recipe) for the window reader: of a window's T tokens,
// positions_per_window(T) = round(0.15 T) (at least 1) are chosen to predict, as BERT's data
// preparation does; of those 80% become the mask token, 10% a random token of the vocabulary and
// 10% stay as they are. The other positions get kernels' ignored label (-1): no loss, no gradient.
// A fixed count per window makes the global batch's count of predicted tokens a constant of the
// run, so the loss is averaged over it with no communication and a recorded GPU step stays valid.
//
// Every draw is a pure function of (seed, epoch, global sample index): the masks are the same at
// any world size, accumulation split and across a resume.
#include <cstdint>

namespace mgt::data {

// The reader option a masked language model asks for; mask_token < 0: no masking (next-token
// labels, the gpt's).
struct MlmMasking {
  int64_t mask_token = -1;
  int64_t vocab = 0;  // random replacements are drawn from [0, vocab)
  uint64_t seed = 0;
  // Evaluation: the same masks at every evaluation (epoch 0's), whatever the epoch.
  bool same_every_epoch = false;
  bool enabled() const { return mask_token >= 0; }
};

inline constexpr double kMaskedFraction = 0.15;

// Positions predicted in a window of `context` tokens: round(0.15 x context), at least 1.
int64_t positions_per_window(int64_t context);

// Masks one window in place: x holds its `context` token ids (as floats) and is given the
// replacements; y (context labels) gets the original token at each chosen position and -1
// elsewhere. `order` is scratch of `context` ints.
void mask_window(const MlmMasking& masking, int64_t epoch, int64_t sample, float* x, int32_t* y, int64_t context,
                 int32_t* order);

}  // namespace mgt::data
