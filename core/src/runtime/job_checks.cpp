#include "runtime/job_checks.hpp"

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "base/atomic_file.hpp"
#include "base/host_name.hpp"
#include "base/sha256.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/version.hpp"

namespace mgt {

namespace {

// Fixed-size text, so every rank's can be gathered as bytes.
template <size_t N>
struct FixedText {
  char text[N] = {};
  explicit FixedText(const std::string& value = "") { std::snprintf(text, N, "%s", value.c_str()); }
  std::string str() const { return std::string(text, strnlen(text, N)); }
};

// The GNU build ID note of one loaded object, as hex; empty when it has none.
std::string build_id_of(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_NOTE) continue;
    const char* note = reinterpret_cast<const char*>(info->dlpi_addr + segment.p_vaddr);
    const char* end = note + segment.p_memsz;
    while (note + sizeof(ElfW(Nhdr)) <= end) {
      const auto* header = reinterpret_cast<const ElfW(Nhdr)*>(note);
      const char* name = note + sizeof(ElfW(Nhdr));
      const char* desc = name + ((header->n_namesz + 3) & ~3u);
      if (header->n_type == NT_GNU_BUILD_ID && header->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        std::string hex;
        char byte[3];
        for (ElfW(Word) k = 0; k < header->n_descsz; ++k) {
          std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(desc[k]));
          hex += byte;
        }
        return hex;
      }
      note = desc + ((header->n_descsz + 3) & ~3u);
    }
  }
  return "";
}

// "rank 2 on n2" or "ranks 2,3 on n2; rank 5 on n3": the given ranks grouped by node.
std::string ranks_and_nodes(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& [host, mine] : group_by_host(ranks, hosts)) {
    std::string list;
    for (int r : mine) list += (list.empty() ? "" : ",") + std::to_string(r);
    out += (out.empty() ? "" : "; ") + std::string(mine.size() > 1 ? "ranks " : "rank ") + list + " on " + host;
  }
  return out;
}

}  // namespace

HostRanks group_by_host(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  HostRanks grouped;
  for (int r : ranks) {
    const std::string& host = hosts[static_cast<size_t>(r)];
    auto it = std::find_if(grouped.begin(), grouped.end(), [&](const auto& g) { return g.first == host; });
    if (it == grouped.end()) it = grouped.insert(grouped.end(), {host, {}});
    it->second.push_back(r);
  }
  return grouped;
}

std::vector<std::string> gather_host_names(Communicator& comm) {
  const FixedText<64> mine(host_name());
  std::vector<FixedText<64>> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), sizeof mine);
  std::vector<std::string> hosts;
  for (const auto& h : all) hosts.push_back(h.str());
  return hosts;
}

std::string build_identity() {
  std::string identity = "mgtrain " MGTRAIN_VERSION;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const std::string file = std::filesystem::path(path).filename().string();
        // The executable (no name), and the mgtrain libraries and plugins (libmgtrain-<kind>-<name>.so).
        if (!path.empty() && file.rfind("libmgtrain", 0) != 0) return 0;
        const std::string id = build_id_of(info);
        auto& text = *static_cast<std::string*>(out);
        // File names, not paths: the same build installed under other prefixes is the same build.
        text += ", " + (path.empty() ? std::string("executable") : file) + " " + (id.empty() ? "no build ID" : id);
        return 0;
      },
      &identity);
  return identity;
}

void check_same_build(Communicator& comm, const std::vector<std::string>& hosts) {
  // A digest from each rank, and rank 0's whole identity only where one differs.
  const std::string mine = build_identity();
  Sha256 hash;
  hash.update(mine.data(), mine.size());
  const FixedText<65> digest(hash.hex_digest());
  std::vector<FixedText<65>> digests(static_cast<size_t>(comm.size()));
  comm.allgather(&digest, digests.data(), sizeof digest);
  std::vector<int> others;
  for (int r = 1; r < comm.size(); ++r)
    if (digests[r].str() != digests[0].str()) others.push_back(r);
  if (others.empty()) return;
  FixedText<8192> reference(comm.rank() == 0 ? mine : "");
  comm.broadcast(&reference, sizeof reference, 0);
  if (digests[comm.rank()].str() == digests[0].str()) return;
  // The parts ("libmgtrain.so.0 <build ID>") that differ from rank 0's, each side.
  const auto parts = [](const std::string& identity) {
    std::vector<std::string> out;
    std::istringstream in(identity);
    for (std::string part; std::getline(in, part, ',');) out.push_back(part.substr(part.find_first_not_of(' ')));
    return out;
  };
  const auto theirs = parts(reference.str()), ours = parts(mine);
  std::string expected, actual;
  for (const auto& part : theirs)
    if (std::find(ours.begin(), ours.end(), part) == ours.end()) expected += (expected.empty() ? "" : ", ") + part;
  for (const auto& part : ours)
    if (std::find(theirs.begin(), theirs.end(), part) == theirs.end()) actual += (actual.empty() ? "" : ", ") + part;
  throw ConfigError(ranks_and_nodes(others, hosts) + (others.size() > 1 ? " run" : " runs") +
                    " another mgtrain build than rank 0 on " + hosts[0] + ": rank 0 has " + expected + ", rank " +
                    std::to_string(comm.rank()) + " has " + actual +
                    ". Every node must run the same build (one install on a shared filesystem, or the same "
                    "package on each node): the ranks exchange gradients and checkpoints in its layout");
}

void check_directory_shared(Communicator& comm, const std::vector<std::string>& hosts, const std::string& dir,
                            const std::string& key) {
  // A name and contents no other run could have written.
  FixedText<64> token;
  if (comm.rank() == 0) {
    std::random_device random;
    std::ostringstream text;
    text << std::hex << random() << random() << random() << random();
    token = FixedText<64>(text.str());
  }
  comm.broadcast(&token, sizeof token, 0);
  const std::filesystem::path probe = std::filesystem::path(dir) / (".mgtrain-shared-" + token.str());
  if (comm.rank() == 0) {
    // A new file (never one already there, a link neither); one that cannot be made is seen by
    // no rank, which the check below reports.
    std::string why;
    const int fd = open_for_writing(probe.string(), WriteOpen::create_new, why);
    if (fd >= 0) {
      const std::string text = token.str() + "\n";
      (void)!::write(fd, text.data(), text.size());
      ::close(fd);
    }
  }
  comm.barrier();
  int32_t seen = 1;
  if (comm.rank() != 0) {
    std::ifstream in(probe);
    std::string content;
    seen = in && std::getline(in, content) && content == token.str() ? 1 : 0;
  }
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&seen, all.data(), sizeof seen);
  if (comm.rank() == 0) {
    std::error_code ignored;
    std::filesystem::remove(probe, ignored);
  }
  std::vector<int> blind;
  for (int r = 0; r < comm.size(); ++r)
    if (!all[r]) blind.push_back(r);
  if (seen) return;
  throw IoError(key + " '" + dir + "': " + ranks_and_nodes(blind, hosts) + (blind.size() > 1 ? " do" : " does") +
                " not see the file rank 0 on " + hosts[0] + " wrote there (" + probe.filename().string() +
                "): every node must see it at the same path, on a filesystem they share (rank 0 writes the "
                "checkpoints, and a resumed run may have rank 0 on another node)");
}

}  // namespace mgt
