#pragma once
// `mgtrain doctor` across nodes: the links between nodes, measured by one rank per node (its
// local rank 0), pair by pair, so that a node whose network is much slower than the others' is
// named before a run spends its all-reduces waiting on it.
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"

namespace mgt::cli {

// One link between two node leaders, measured from the first.
struct NodeLink {
  int node_a = 0, node_b = 0;  // indices into the hosts given to measure_node_links
  double latency_us = 0.0;     // half the median round trip of a small message
  double gbytes_per_s = 0.0;   // median of a large message one way and a small reply
};

// Collective over every rank of `comm`. leaders[i]: the rank that measures for node i (hosts[i]).
// Every pair of nodes when there are at most kAllPairsNodes, beyond that each node with the next
// (a ring), which keeps the time linear in the nodes. Every rank returns every link.
constexpr size_t kAllPairsNodes = 8;
std::vector<NodeLink> measure_node_links(Communicator& comm, const std::vector<int>& leaders);

// What the verdict says of the links: a node whose every link is under a third of the fastest
// link's bandwidth is named, then each other such link. With one link there is nothing to compare
// it with.
std::vector<std::string> judge_node_links(const std::vector<NodeLink>& links, const std::vector<std::string>& hosts);

// The table rank 0 prints: one line per link.
void print_node_links(const std::vector<NodeLink>& links, const std::vector<std::string>& hosts);

}  // namespace mgt::cli
