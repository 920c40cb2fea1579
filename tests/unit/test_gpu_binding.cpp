// The rank -> GPU rule (local_rank % visible GPUs), the refusal or warning when ranks would share a
// GPU, and the line about a GPU other processes already use.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/gpu_binding.hpp"
#include "mgtrain/error.hpp"

using namespace mgt;

namespace {

// The ConfigError's message; fails the test when none (or another type) is thrown.
template <typename F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

}  // namespace

TEST(GpuBinding, OneRankPerGpuTakesItsLocalRank) {
  for (int local = 0; local < 4; ++local) {
    // Node 1 of a job with four ranks per node: global rank 4 + local.
    const GpuChoice c = choose_gpu(4 + local, local, 4, 1, "gpu02", 4, false);
    EXPECT_EQ(c.device, local);
    EXPECT_EQ(c.warning, "");
  }
  // Fewer ranks than GPUs: the first ones are used, nobody shares.
  EXPECT_EQ(choose_gpu(1, 1, 2, 0, "gpu01", 8, false).device, 1);
  EXPECT_EQ(choose_gpu(1, 1, 2, 0, "gpu01", 8, false).warning, "");
}

TEST(GpuBinding, SharedGpusWrapWithAWarningWhenAllowed) {
  for (int local = 0; local < 4; ++local) {
    const GpuChoice c = choose_gpu(8 + local, local, 4, 2, "gpu03", 2, true);
    EXPECT_EQ(c.device, local % 2);
    EXPECT_NE(c.warning.find("rank " + std::to_string(8 + local) + " (local rank " + std::to_string(local) + ")"),
              std::string::npos)
        << c.warning;
    EXPECT_NE(c.warning.find("GPU " + std::to_string(local % 2)), std::string::npos) << c.warning;
    EXPECT_NE(c.warning.find("gpu.allow_shared"), std::string::npos) << c.warning;
  }
  EXPECT_EQ(choose_gpu(2, 2, 4, 0, "gpu01", 2, true).warning,
            "4 ranks on node 0 (host gpu01) but 2 visible GPUs: rank 2 (local rank 2) shares GPU 0 "
            "with local rank 0 (gpu.allow_shared = true), so each has part of its speed and memory");
  // Three ranks on one GPU: both others are named.
  EXPECT_NE(choose_gpu(1, 1, 3, 0, "gpu01", 1, true).warning.find("with local ranks 0 and 2"), std::string::npos);
}

TEST(GpuBinding, SharedGpusAreRefusedUnlessAllowed) {
  EXPECT_EQ(config_error_of([] { choose_gpu(2, 2, 4, 0, "gpu01", 2, false); }),
            "4 ranks on node 0 (host gpu01) but 2 visible GPUs: rank 2 (local rank 2) would share "
            "GPU 0 with local rank 0; use one rank per GPU (mpirun -np 2, or --map-by ppr:2:node "
            "across nodes) or set gpu.allow_shared = true");
  // The global rank and the local one differ on a second node; both are named.
  const std::string m = config_error_of([] { choose_gpu(7, 3, 4, 1, "gpu02", 1, false); });
  EXPECT_NE(m.find("rank 7 (local rank 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("node 1 (host gpu02)"), std::string::npos) << m;
  EXPECT_NE(m.find("1 visible GPU:"), std::string::npos) << m;
  EXPECT_NE(m.find("with local ranks 0, 1 and 2"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu.allow_shared = true"), std::string::npos) << m;
}

TEST(GpuBinding, EveryRankOfACrowdedNodeRefuses) {
  // Three ranks, two GPUs: local rank 1 has GPU 1 alone, but refuses too, so it never waits in a
  // collective for ranks that stopped.
  const std::string m = config_error_of([] { choose_gpu(1, 1, 3, 0, "gpu01", 2, false); });
  EXPECT_NE(m.find("rank 1 (local rank 1) has GPU 1 to itself"), std::string::npos) << m;
  EXPECT_NE(m.find("local ranks 0 and 2 would share GPU 0"), std::string::npos) << m;
  // Allowed, it has nothing to warn about.
  const GpuChoice c = choose_gpu(1, 1, 3, 0, "gpu01", 2, true);
  EXPECT_EQ(c.device, 1);
  EXPECT_EQ(c.warning, "");
}

TEST(GpuBinding, NoVisibleGpuChoosesNone) {
  for (bool allow : {false, true}) {
    const GpuChoice c = choose_gpu(3, 3, 8, 0, "cpu01", 0, allow);
    EXPECT_EQ(c.device, -1);
    EXPECT_EQ(c.warning, "");
  }
}

TEST(GpuBinding, ImpossibleNodeLayoutsThrow) {
  EXPECT_THROW(choose_gpu(0, 4, 4, 0, "h", 4, false), Error);  // local rank past the node
  EXPECT_THROW(choose_gpu(0, -1, 4, 0, "h", 4, false), Error);
  EXPECT_THROW(choose_gpu(0, 0, 0, 0, "h", 4, false), Error);
  EXPECT_THROW(choose_gpu(0, 0, 1, 0, "h", -1, false), Error);
}

// A parameter server's serving ranks need no GPU: the GPUs go to the training ranks of each node,
// numbered among themselves.
TEST(GpuBinding, ServingRanksLeaveTheGpusToTheTrainingRanks) {
  // Two nodes of five ranks; rank 4 and rank 9 serve (the last ranks of a job, or any).
  const std::vector<int> nodes = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  std::vector<bool> trains(10, true);
  trains[4] = trains[9] = false;
  for (int r = 0; r < 10; ++r) {
    const mgt::NodePlace p = mgt::training_place(nodes, trains, r);
    EXPECT_EQ(p.count, 4) << r;
    EXPECT_EQ(p.serving, 1) << r;
    EXPECT_EQ(p.index, trains[r] ? r % 5 : -1) << r;
  }
  // A server in the middle of a node: the training ranks after it move up.
  trains.assign(10, true);
  trains[1] = false;
  EXPECT_EQ(mgt::training_place(nodes, trains, 2).index, 1);
  EXPECT_EQ(mgt::training_place(nodes, trains, 0).index, 0);
  EXPECT_EQ(mgt::training_place(nodes, trains, 7).index, 2);  // node 1 is untouched
  EXPECT_THROW(mgt::training_place(nodes, trains, 10), Error);

  // Eight GPUs, eight training ranks and one server on the node: each trainer has a GPU.
  const GpuChoice c = choose_gpu(7, 7, 8, 0, "gpu01", 8, false, /*serving_on_node=*/1);
  EXPECT_EQ(c.device, 7);
  EXPECT_EQ(c.warning, "");
  // Nine training ranks and a server: refused, counting the trainers, and the advice counts both.
  const std::string m = config_error_of([] { choose_gpu(8, 8, 9, 0, "gpu01", 8, false, 1); });
  EXPECT_NE(m.find("9 training ranks (and 1 serving, without a GPU) on node 0"), std::string::npos) << m;
  EXPECT_NE(m.find("use one training rank per GPU (mpirun -np 9,"), std::string::npos) << m;
}

TEST(GpuBinding, BusyGpuLineAppearsOnlyOverTheThreshold) {
  EXPECT_EQ(busy_gpu_line(0, "NVIDIA H200", "00000000:1A:00.0", 20480, 143771, 1024),
            "GPU 0 (NVIDIA H200, 00000000:1A:00.0) already has 20480 MB of 143771 MB in use by "
            "other processes");
  EXPECT_EQ(busy_gpu_line(0, "NVIDIA H200", "00000000:1A:00.0", 1023.9, 143771, 1024), "");
  EXPECT_EQ(busy_gpu_line(0, "NVIDIA H200", "00000000:1A:00.0", 1024, 143771, 1024), "");
  EXPECT_NE(busy_gpu_line(0, "NVIDIA H200", "00000000:1A:00.0", 1024.5, 143771, 1024), "");
  // A zero threshold reports any memory at all; none is never reported.
  EXPECT_NE(busy_gpu_line(3, "x", "y", 1, 80, 0), "");
  EXPECT_EQ(busy_gpu_line(3, "x", "y", 0, 80, 0), "");
  // Figures are whole MB; missing labels leave no empty parentheses or commas.
  EXPECT_EQ(busy_gpu_line(1, "", "0000:3B:00.0", 512.6, 81920.4, 100),
            "GPU 1 (0000:3B:00.0) already has 513 MB of 81920 MB in use by other processes");
  EXPECT_EQ(busy_gpu_line(2, "", "", 2000, 4000, 100),
            "GPU 2 already has 2000 MB of 4000 MB in use by other processes");
}
