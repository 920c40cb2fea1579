// BERT's masking recipe (datasets/mlm_masks.hpp) and its path through the window reader and the
// loss: the proportions over many windows, the 80/10/10 split, the independence from the world
// size, and the loss of the ignored labels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/mlm_masks.hpp"
#include "datasets/token_file.hpp"
#include "datasets/token_reader.hpp"
#include "kernels/cpu/softmax.hpp"

namespace fs = std::filesystem;
using mgt::data::MlmMasking;

namespace {

MlmMasking byte_masking(uint64_t seed) {
  MlmMasking m;
  m.mask_token = 256;
  m.vocab = 256;
  m.seed = seed;
  return m;
}

// A window of distinct-looking token ids: sample s, position t.
std::vector<float> window_tokens(int64_t sample, int64_t context) {
  std::vector<float> x(static_cast<size_t>(context));
  for (int64_t t = 0; t < context; ++t) x[t] = static_cast<float>((sample * 7 + t * 13) % 256);
  return x;
}

TEST(MlmMasks, PositionsPerWindowAreFifteenPercentRounded) {
  EXPECT_EQ(mgt::data::positions_per_window(128), 19);  // 19.2
  EXPECT_EQ(mgt::data::positions_per_window(32), 5);    // 4.8
  EXPECT_EQ(mgt::data::positions_per_window(100), 15);
  EXPECT_EQ(mgt::data::positions_per_window(2), 1);  // at least one
  EXPECT_EQ(mgt::data::positions_per_window(1), 1);
}

TEST(MlmMasks, RecipeProportionsOverManyWindows) {
  const int64_t T = 64, windows = 20000, k = mgt::data::positions_per_window(T);
  const MlmMasking m = byte_masking(7);
  std::vector<int32_t> y(T), order(T);
  std::vector<int64_t> chosen_at(T, 0);
  int64_t chosen = 0, masked = 0, replaced = 0, same = 0;
  for (int64_t s = 0; s < windows; ++s) {
    const std::vector<float> original = window_tokens(s, T);
    std::vector<float> x = original;
    mgt::data::mask_window(m, 3, s, x.data(), y.data(), T, order.data());
    int64_t here = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (y[t] == -1) {
        ASSERT_EQ(x[t], original[t]) << "an unpredicted position changed, window " << s << " position " << t;
        continue;
      }
      ++here;
      ++chosen_at[t];
      ASSERT_EQ(y[t], static_cast<int32_t>(original[t])) << "the label is not the original token";
      if (x[t] == 256.0f)
        ++masked;
      else if (x[t] != original[t])
        ++replaced;
      else
        ++same;
      ASSERT_GE(x[t], 0.0f);
      ASSERT_LE(x[t], 256.0f);
    }
    ASSERT_EQ(here, k) << "window " << s << " predicts another count of positions";
    chosen += here;
  }
  const double n = static_cast<double>(chosen);
  // 128,000 chosen positions: a binomial share's standard deviation is at most 0.0014.
  EXPECT_NEAR(masked / n, 0.8, 0.01);
  // A random token equals the original one time in 256: 10% x 255/256 differ, 10% + 10%/256 stay.
  EXPECT_NEAR(replaced / n, 0.1 * 255.0 / 256.0, 0.008);
  EXPECT_NEAR(same / n, 0.1 + 0.1 / 256.0, 0.008);
  // Every position is chosen about equally often (k / T of the windows: 3125 each, sd 52).
  for (int64_t t = 0; t < T; ++t)
    EXPECT_NEAR(static_cast<double>(chosen_at[t]) / windows, static_cast<double>(k) / T, 0.015) << "position " << t;
}

TEST(MlmMasks, APureFunctionOfSeedEpochAndSample) {
  const int64_t T = 40;
  std::vector<int32_t> y1(T), y2(T), order(T);
  const auto masked = [&](const MlmMasking& m, int64_t epoch, int64_t sample, std::vector<int32_t>& y) {
    std::vector<float> x = window_tokens(sample, T);
    mgt::data::mask_window(m, epoch, sample, x.data(), y.data(), T, order.data());
    return x;
  };
  EXPECT_EQ(masked(byte_masking(1), 2, 5, y1), masked(byte_masking(1), 2, 5, y2));
  EXPECT_EQ(y1, y2);
  masked(byte_masking(1), 3, 5, y2);
  EXPECT_NE(y1, y2) << "another epoch draws the same positions";
  masked(byte_masking(2), 2, 5, y2);
  EXPECT_NE(y1, y2) << "another seed draws the same positions";
  MlmMasking fixed = byte_masking(1);
  fixed.same_every_epoch = true;
  masked(fixed, 0, 5, y1);
  masked(fixed, 9, 5, y2);
  EXPECT_EQ(y1, y2) << "evaluation's masks move with the epoch";
}

class MlmReader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mgt_mlm_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string text = (dir_ / "text.txt").string();
    std::ofstream out(text, std::ios::binary);
    for (int i = 0; i < 20000; ++i) out.put(static_cast<char>('a' + (i * 7919 % 26)));
    out.close();
    path_ = (dir_ / "tokens.h5").string();
    mgt::data::convert_text({text}, path_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  std::string path_;
};

// The global batch's inputs and labels over `world` ranks, rank by rank in order.
std::pair<std::vector<float>, std::vector<int32_t>> global_batch(const std::string& path, int world, int64_t epoch,
                                                                 int64_t batch) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int rank = 0; rank < world; ++rank) {
    mgt::data::ReaderOptions o;
    o.path = path;
    o.global_batch = 8;
    o.rank = rank;
    o.world = world;
    o.seed = 5;
    o.context = 32;
    o.vocab_limit = 256;
    o.mlm = byte_masking(5);
    mgt::data::TokenReader reader(o);
    reader.start(epoch, batch);
    const mgt::data::Batch b = reader.next();
    x.insert(x.end(), b.x.data(), b.x.data() + b.x.numel());
    y.insert(y.end(), b.y, b.y + b.rows * 32);
  }
  return {x, y};
}

TEST_F(MlmReader, ReaderMasksTheSameAtEveryWorldSize) {
  const auto one = global_batch(path_, 1, 1, 3);
  int64_t predicted = 0;
  for (int32_t label : one.second) predicted += label != -1;
  EXPECT_EQ(predicted, 8 * mgt::data::positions_per_window(32));
  for (int world : {2, 4, 8}) {
    const auto split = global_batch(path_, world, 1, 3);
    EXPECT_EQ(split.first, one.first) << "the inputs differ at world size " << world;
    EXPECT_EQ(split.second, one.second) << "the labels differ at world size " << world;
  }
  EXPECT_NE(global_batch(path_, 1, 1, 4).second, one.second) << "the next batch has the same masks";
}

TEST(MlmLoss, IgnoredLabelsAddNothingAndGetNoGradient) {
  const int64_t classes = 5;
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 0.5f, 0.3f, 1.5f, -0.2f, 0.0f,
                                     0.7f, 2.2f, -0.4f, 0.9f, 1.1f, 0.2f, -1.3f};
  const std::vector<int32_t> labels = {1, mgt::kernels::kIgnoredLabel, 3};
  std::vector<float> grad(logits.size(), 9.0f);
  const double loss = mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), 3, classes, 0.5f);
  // The two labelled rows alone, through the same kernel.
  const std::vector<float> kept = {0.1f, 2.0f, -1.0f, 0.5f, 0.3f, -0.4f, 0.9f, 1.1f, 0.2f, -1.3f};
  const std::vector<int32_t> kept_labels = {1, 3};
  std::vector<float> kept_grad(kept.size());
  const double want =
      mgt::kernels::softmax_cross_entropy(kept.data(), kept_labels.data(), kept_grad.data(), 2, classes, 0.5f);
  EXPECT_EQ(loss, want);
  for (int64_t c = 0; c < classes; ++c) {
    EXPECT_EQ(grad[c], kept_grad[c]);
    EXPECT_EQ(grad[classes + c], 0.0f) << "the ignored row has a gradient";
    EXPECT_EQ(grad[2 * classes + c], kept_grad[classes + c]);
  }
  // Row 1's arg-max (class 4) would match a label of 4; ignored, it counts for nothing.
  EXPECT_EQ(mgt::kernels::count_correct(logits.data(), labels.data(), 3, classes),
            mgt::kernels::count_correct(kept.data(), kept_labels.data(), 2, classes));
  EXPECT_NO_THROW(mgt::kernels::check_labels(labels.data(), 3, classes));
  const std::vector<int32_t> bad = {1, -2, 3};
  EXPECT_THROW(mgt::kernels::check_labels(bad.data(), 3, classes), mgt::DataError);
}

}  // namespace
