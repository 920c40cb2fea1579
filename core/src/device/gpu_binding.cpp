#include "device/gpu_binding.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace {

std::string plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// "local rank 0", "local ranks 0 and 4", "local ranks 0, 4 and 6".
std::string local_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "local rank " : "local ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

NodePlace training_place(const std::vector<int>& nodes, const std::vector<bool>& trains, int rank) {
  MGT_CHECK(nodes.size() == trains.size() && rank >= 0 && static_cast<size_t>(rank) < nodes.size(), Error,
            "training_place: rank " + std::to_string(rank) + " of " + std::to_string(nodes.size()) + " ranks");
  NodePlace place;
  for (size_t r = 0; r < nodes.size(); ++r) {
    if (nodes[r] != nodes[static_cast<size_t>(rank)]) continue;
    if (!trains[r]) {
      ++place.serving;
      continue;
    }
    if (static_cast<int>(r) == rank) place.index = place.count;
    ++place.count;
  }
  return place;
}

NodePlace gather_training_place(Communicator& comm, bool trains) {
  const int32_t mine[2] = {comm.node(), trains ? 1 : 0};
  std::vector<int32_t> all(2 * static_cast<size_t>(comm.size()));
  comm.allgather(mine, all.data(), sizeof mine);
  std::vector<int> nodes;
  std::vector<bool> training;
  for (size_t r = 0; r < all.size(); r += 2) {
    nodes.push_back(all[r]);
    training.push_back(all[r + 1] != 0);
  }
  return training_place(nodes, training, comm.rank());
}

GpuChoice choose_gpu(int rank, int local_rank, int local_size, int node, const std::string& host, int visible_gpus,
                     bool allow_shared, int serving_on_node) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size || visible_gpus < 0)
    throw Error("choosing a GPU for rank " + std::to_string(rank) + ": local rank " + std::to_string(local_rank) +
                " of " + std::to_string(local_size) + " with " + std::to_string(visible_gpus) +
                " visible GPUs is impossible");
  if (visible_gpus == 0) return {};

  GpuChoice choice;
  choice.device = local_rank % visible_gpus;
  if (local_size <= visible_gpus) return choice;

  // The other ranks of this node on the same GPU.
  std::vector<int> with;
  for (int other = choice.device; other < local_size; other += visible_gpus)
    if (other != local_rank) with.push_back(other);

  const std::string ranks = serving_on_node > 0 ? plural(local_size, "training rank") + " (and " +
                                                      std::to_string(serving_on_node) + " serving, without a GPU)"
                                                : plural(local_size, "rank");
  const std::string where = ranks + " on node " + std::to_string(node) + " (host " + host + ") but " +
                            plural(visible_gpus, "visible GPU") + ": ";
  const std::string who = "rank " + std::to_string(rank) + " (local rank " + std::to_string(local_rank) + ")";
  if (allow_shared) {
    // A rank with a GPU to itself has nothing to warn about, even on a crowded node.
    if (!with.empty())
      choice.warning = where + who + " shares GPU " + std::to_string(choice.device) + " with " + local_ranks(with) +
                       " (gpu.allow_shared = true), so each has part of its speed and memory";
    return choice;
  }

  std::string what;
  if (!with.empty()) {
    what = who + " would share GPU " + std::to_string(choice.device) + " with " + local_ranks(with);
  } else {
    // Every rank of the node refuses, so none is left waiting for the others; this one names the
    // ranks that do share (GPU 0 always has local ranks 0 and visible_gpus).
    std::vector<int> on_gpu0;
    for (int other = 0; other < local_size; other += visible_gpus) on_gpu0.push_back(other);
    what = who + " has GPU " + std::to_string(choice.device) + " to itself, but " + local_ranks(on_gpu0) +
           " would share GPU 0";
  }
  const std::string gpus = std::to_string(visible_gpus);
  const std::string per_node = std::to_string(visible_gpus + serving_on_node);
  throw ConfigError(where + what + "; use one " + (serving_on_node > 0 ? "training " : "") +
                    "rank per GPU (mpirun -np " + per_node + ", or --map-by ppr:" + per_node +
                    ":node across nodes) or set gpu.allow_shared = true");
}

std::string busy_gpu_line(int device, const std::string& name, const std::string& pci_bus_id, double used_mb,
                          double total_mb, double threshold_mb) {
  if (!(used_mb > threshold_mb)) return "";
  std::string label = name;
  if (!pci_bus_id.empty()) label += (label.empty() ? "" : ", ") + pci_bus_id;
  char figures[96];
  std::snprintf(figures, sizeof figures, "%.0f MB of %.0f MB", std::round(used_mb), std::round(total_mb));
  return "GPU " + std::to_string(device) + (label.empty() ? "" : " (" + label + ")") + " already has " + figures +
         " in use by other processes";
}

}  // namespace mgt
