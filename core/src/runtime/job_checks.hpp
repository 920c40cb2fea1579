#pragma once
// Checks of a job across nodes, made before step 1, that one node alone cannot make: every rank
// runs the same mgtrain build, and every rank sees the same checkpoint directory. On one node
// both hold by construction; across nodes they fail when installs or filesystems differ per node.
// Each is a collective; it throws on the ranks it finds wrong, naming them and their nodes (call
// it inside agree(), which reports the lowest failing rank's message).
#include <string>
#include <utility>
#include <vector>

#include "mgtrain/communicator.hpp"

namespace mgt {

// The given ranks grouped by their host (hosts[r]: rank r's), hosts in order of first appearance.
using HostRanks = std::vector<std::pair<std::string, std::vector<int>>>;
HostRanks group_by_host(const std::vector<int>& ranks, const std::vector<std::string>& hosts);

// Every rank's host name, by rank. A collective.
std::vector<std::string> gather_host_names(Communicator& comm);

// What identifies this process's mgtrain build: the version and the GNU build IDs (a hash of the
// linked contents) of the executable and of the mgtrain libraries and plugins loaded so far, by
// file name, as "mgtrain 0.1.0, executable <id>, libmgtrain.so.0 <id>, ...".
std::string build_identity();

// Throws on every rank whose build_identity() differs from rank 0's, naming the parts that differ.
void check_same_build(Communicator& comm, const std::vector<std::string>& hosts);

// Rank 0 writes a file of its own in `dir` (which exists on rank 0); throws on every rank that
// does not see that file there. `key` names the directory's config key in the message.
void check_directory_shared(Communicator& comm, const std::vector<std::string>& hosts, const std::string& dir,
                            const std::string& key);

}  // namespace mgt
