#include "doctor_links.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

namespace mgt::cli {

namespace {

constexpr int kTag = 7401;
constexpr int kRoundTrips = 30;                  // small messages, for the latency
constexpr int kTransfers = 5;                    // large messages, for the bandwidth
constexpr size_t kLargeBytes = size_t{4} << 20;  // 4 MiB: far past every eager limit
// A link under a third of the fastest one's bandwidth is slow. Not judged by latency: on a loaded
// machine a blocked process waits for its time slice, and the round trips vary tenfold.
constexpr double kSlowBandwidth = 1.0 / 3.0;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The pairs to measure, as node indices.
std::vector<std::pair<int, int>> pairs_to_measure(int nodes) {
  std::vector<std::pair<int, int>> pairs;
  if (static_cast<size_t>(nodes) <= kAllPairsNodes) {
    for (int a = 0; a < nodes; ++a)
      for (int b = a + 1; b < nodes; ++b) pairs.emplace_back(a, b);
  } else {
    for (int a = 0; a < nodes; ++a) pairs.emplace_back(std::min(a, (a + 1) % nodes), std::max(a, (a + 1) % nodes));
  }
  return pairs;
}

// One side of a pair's measurement: the measuring side sends, the other echoes. Returns the link
// on the measuring side.
NodeLink measure_pair(Communicator& comm, int peer, bool measures, std::vector<char>& large) {
  char small[8] = {};
  std::vector<double> round_trips, transfers;
  for (int i = 0; i <= kRoundTrips; ++i) {  // the first one warms up the connection
    const auto start = std::chrono::steady_clock::now();
    if (measures) {
      comm.send(small, sizeof small, peer, kTag);
      comm.recv(small, sizeof small, peer, kTag);
      if (i > 0) round_trips.push_back(seconds_since(start));
    } else {
      comm.recv(small, sizeof small, peer, kTag);
      comm.send(small, sizeof small, peer, kTag);
    }
  }
  for (int i = 0; i <= kTransfers; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (measures) {
      comm.send(large.data(), large.size(), peer, kTag);
      comm.recv(small, sizeof small, peer, kTag);
      if (i > 0) transfers.push_back(seconds_since(start));
    } else {
      comm.recv(large.data(), large.size(), peer, kTag);
      comm.send(small, sizeof small, peer, kTag);
    }
  }
  NodeLink link;
  if (!measures) return link;
  const double round_trip = median(round_trips);
  link.latency_us = round_trip / 2.0 * 1e6;
  // The reply's own time is the small message's, taken off so the figure is the one-way transfer.
  link.gbytes_per_s = kLargeBytes / std::max(median(transfers) - round_trip / 2.0, 1e-9) / 1e9;
  return link;
}

std::string bandwidth(const NodeLink& link) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GB/s", link.gbytes_per_s);
  return text;
}

std::string link_name(const NodeLink& link, const std::vector<std::string>& hosts) {
  return hosts[link.node_a] + " <-> " + hosts[link.node_b];
}

}  // namespace

std::vector<NodeLink> measure_node_links(Communicator& comm, const std::vector<int>& leaders) {
  const auto pairs = pairs_to_measure(static_cast<int>(leaders.size()));
  // Per pair: latency and bandwidth, filled in by the measuring leader, summed over the ranks.
  std::vector<double> figures(pairs.size() * 2, 0.0);
  std::vector<char> large;
  // One pair at a time: two measurements at once would share the machines' links and halve each.
  for (size_t p = 0; p < pairs.size(); ++p) {
    const int a = leaders[pairs[p].first], b = leaders[pairs[p].second];
    if (comm.rank() != a && comm.rank() != b) continue;
    if (large.empty()) large.assign(kLargeBytes, 1);
    const NodeLink link = measure_pair(comm, comm.rank() == a ? b : a, comm.rank() == a, large);
    if (comm.rank() == a) {
      figures[2 * p] = link.latency_us;
      figures[2 * p + 1] = link.gbytes_per_s;
    }
  }
  comm.allreduce_sum(figures.data(), figures.size());
  std::vector<NodeLink> links;
  for (size_t p = 0; p < pairs.size(); ++p)
    links.push_back({pairs[p].first, pairs[p].second, figures[2 * p], figures[2 * p + 1]});
  return links;
}

std::vector<std::string> judge_node_links(const std::vector<NodeLink>& links, const std::vector<std::string>& hosts) {
  std::vector<std::string> problems;
  if (links.size() < 2) return problems;
  const NodeLink& fastest = *std::max_element(
      links.begin(), links.end(), [](const NodeLink& x, const NodeLink& y) { return x.gbytes_per_s < y.gbytes_per_s; });
  const auto slow = [&](const NodeLink& link) { return link.gbytes_per_s < kSlowBandwidth * fastest.gbytes_per_s; };
  const std::string reference =
      "the fastest link between nodes (" + link_name(fastest, hosts) + ") reaches " + bandwidth(fastest);
  const std::string consequence =
      ": it sets the pace of every all-reduce across nodes (a slower network path, "
      "a misconfigured interface, or another job's traffic)";
  // A node all of whose links are slow is the one to look at.
  std::set<size_t> named;  // links already in a node's line
  for (size_t node = 0; node < hosts.size(); ++node) {
    std::vector<size_t> mine;
    for (size_t i = 0; i < links.size(); ++i)
      if (links[i].node_a == static_cast<int>(node) || links[i].node_b == static_cast<int>(node)) mine.push_back(i);
    if (mine.size() < 2 || !std::all_of(mine.begin(), mine.end(), [&](size_t i) { return slow(links[i]); })) continue;
    std::string text = "node " + hosts[node] + " is slow to reach every other node:";
    for (size_t i : mine) {
      const NodeLink& link = links[i];
      text +=
          " " + hosts[link.node_a == static_cast<int>(node) ? link.node_b : link.node_a] + " " + bandwidth(link) + ",";
      named.insert(i);
    }
    text.pop_back();
    problems.push_back(text + "; " + reference + consequence);
  }
  for (size_t i = 0; i < links.size(); ++i) {
    if (named.count(i) || !slow(links[i])) continue;
    problems.push_back("link " + link_name(links[i], hosts) + ": " + bandwidth(links[i]) + "; " + reference +
                       consequence);
  }
  return problems;
}

void print_node_links(const std::vector<NodeLink>& links, const std::vector<std::string>& hosts) {
  if (links.empty()) return;
  std::printf("links between nodes (node leaders, point to point; %s):\n",
              hosts.size() <= kAllPairsNodes ? "every pair" : "each node with the next");
  size_t width = 0;
  for (const NodeLink& link : links) width = std::max(width, link_name(link, hosts).size());
  for (const NodeLink& link : links) {
    const std::string name = link_name(link, hosts);
    std::printf("  %s%s  %10.3g GB/s  %8.1f us\n", name.c_str(), std::string(width - name.size(), ' ').c_str(),
                link.gbytes_per_s, link.latency_us);
  }
}

}  // namespace mgt::cli
