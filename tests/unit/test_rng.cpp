// The counter-based generator: values are pure functions of (seed, purpose, index).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "mgtrain/rng.hpp"

using namespace mgt;

TEST(Rng, PhiloxMatchesPublishedKnownAnswer) {
  // Random123's kat_vectors: philox4x32_10 with counter and key all ones (0xffffffff).
  const auto w = rng::philox(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(w[0], 0x408f276du);
  EXPECT_EQ(w[1], 0x41c83b0eu);
  EXPECT_EQ(w[2], 0xa20bc7c6u);
  EXPECT_EQ(w[3], 0x6d5451fdu);
  const auto z = rng::philox(0, 0, 0);
  EXPECT_EQ(z[0], 0x6627e8d5u);
  EXPECT_EQ(z[1], 0xe169c58du);
  EXPECT_EQ(z[2], 0xbc57ac4cu);
  EXPECT_EQ(z[3], 0x9b00dbd8u);
}

TEST(Rng, FillUniformMatchesElementwiseAndOffset) {
  const uint64_t key = rng::make_key(42, rng::purpose_hash("fc1.weight"));
  std::vector<float> a(37), b(30);
  rng::fill_uniform(a.data(), a.size(), -1.0f, 1.0f, key, 0);
  rng::fill_uniform(b.data(), b.size(), -1.0f, 1.0f, key, 0, 7);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[i + 7], b[i]);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], -1.0f + 2.0f * rng::uniform(key, 0, i));
    EXPECT_GE(a[i], -1.0f);
    EXPECT_LT(a[i], 1.0f);
  }
}

TEST(Rng, EpochPermutationIsAPureFunctionOfSeedAndEpoch) {
  const auto p1 = rng::epoch_permutation(7, 3, 1000);
  const auto p2 = rng::epoch_permutation(7, 3, 1000);
  const auto p3 = rng::epoch_permutation(7, 4, 1000);
  const auto p4 = rng::epoch_permutation(8, 3, 1000);
  EXPECT_EQ(p1, p2);
  EXPECT_NE(p1, p3);
  EXPECT_NE(p1, p4);
  auto sorted = p1;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
}

// The order a seeded run reads its data in, pinned: a checkpoint written by an earlier build
// resumes on the same samples, and a seeded run repeats an earlier build's bits, only while these
// values stay.
TEST(Rng, EpochPermutationKeepsItsValues) {
  const auto p = rng::epoch_permutation(7, 3, 1000);
  EXPECT_EQ(std::vector<int64_t>(p.begin(), p.begin() + 8),
            (std::vector<int64_t>{312, 926, 164, 254, 197, 999, 925, 62}));
  const auto q = rng::epoch_permutation(42, 0, 60000);
  EXPECT_EQ(std::vector<int64_t>(q.begin(), q.begin() + 8),
            (std::vector<int64_t>{27044, 42087, 38300, 23512, 25285, 47286, 20738, 48396}));
}

TEST(Rng, UniformIsRoughlyUniform) {
  const uint64_t key = rng::make_key(1, rng::purpose_hash("check"));
  std::vector<float> v(100000);
  rng::fill_uniform(v.data(), v.size(), 0.0f, 1.0f, key, 0);
  double mean = 0;
  for (float x : v) mean += x;
  mean /= static_cast<double>(v.size());
  EXPECT_NEAR(mean, 0.5, 0.01);
}

#include "base/sha256.hpp"

TEST(Rng, Sha256MatchesPublishedVectors) {
  mgt::Sha256 empty;
  EXPECT_EQ(empty.hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  mgt::Sha256 abc;
  abc.update("abc", 3);
  EXPECT_EQ(abc.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  mgt::Sha256 two_blocks;  // 56 bytes: the padding spills into a second block
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  for (char c : text) two_blocks.update(&c, 1);
  EXPECT_EQ(two_blocks.hex_digest(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
