#pragma once
// Which GPU a rank trains on, and whether that GPU is already busy: pure functions of what the
// rank knows about its node, so the rules are testable on a machine without a GPU.
#include <string>
#include <vector>

namespace mgt {

// device -1: no GPU (the caller decides about the CPU fallback). warning: non-empty when the
// choice is allowed but worth a line in the log (ranks sharing a GPU).
struct GpuChoice {
  int device = -1;
  std::string warning;
};

// Where rank `rank` stands among the ranks of its node that train, from every rank's node and
// whether it trains (in rank order): a parameter server's serving ranks need no GPU, so the GPUs
// go to the training ranks alone. index: its place among them (-1 when it serves); count: how many
// train on its node; serving: how many serve there.
struct NodePlace {
  int index = -1, count = 0, serving = 0;
};
NodePlace training_place(const std::vector<int>& nodes, const std::vector<bool>& trains, int rank);

class Communicator;
// This rank's training_place, from every rank's node and role gathered over `comm`: a collective
// every rank enters.
NodePlace gather_training_place(Communicator& comm, bool trains);

// Rank `rank` (node-local rank local_rank of local_size on node `node`, host `host`) uses GPU
// local_rank % visible_gpus. More ranks on a node than GPUs puts two ranks on one GPU, which
// halves each one's speed and memory: every rank of such a node refuses with a ConfigError (all
// of them, so none waits for the others in a collective) unless allow_shared
// (gpu.allow_shared = true), in which case the ranks that share carry a warning. Both name the
// rank, the node's ranks and the GPUs. visible_gpus == 0 gives {-1, ""}. With serving_on_node > 0,
// local_rank and local_size count the node's training ranks only (training_place), and the
// messages say so.
GpuChoice choose_gpu(int rank, int local_rank, int local_size, int node, const std::string& host, int visible_gpus,
                     bool allow_shared, int serving_on_node = 0);

// "GPU 0 (NVIDIA H200, 00000000:1A:00.0) already has 20480 MB of 143771 MB in use by other
// processes" when used_mb, read before this job created its contexts, exceeds threshold_mb (a
// shared server); "" at or under it. MB are MiB, as nvidia-smi counts them.
std::string busy_gpu_line(int device, const std::string& name, const std::string& pci_bus_id, double used_mb,
                          double total_mb, double threshold_mb);

}  // namespace mgt
