#include "runtime/agreement.hpp"

#include <new>
#include <sstream>
#include <utility>

#include "base/host_memory.hpp"

#include "comm/mpi_communicator.hpp"
#include "mgtrain/rng.hpp"

namespace mgt {

namespace {

// The first entry where two texts differ, each side quoted ("(none)" past the end of one).
std::string first_difference(const std::string& a, const std::string& b, char separator, int rank_b) {
  std::vector<std::string> ea, eb;
  for (auto [text, out] : {std::pair{&a, &ea}, std::pair{&b, &eb}}) {
    std::stringstream in(*text);
    for (std::string entry; std::getline(in, entry, separator);) out->push_back(entry);
  }
  size_t i = 0;
  while (i < ea.size() && i < eb.size() && ea[i] == eb[i]) ++i;
  auto entry = [](const std::vector<std::string>& e, size_t k) {
    return k < e.size() ? "'" + e[k] + "'" : std::string("(none)");
  };
  return "rank 0 has " + entry(ea, i) + ", rank " + std::to_string(rank_b) + " has " + entry(eb, i);
}

}  // namespace

void check_agreement(Communicator& comm, const std::vector<AgreementItem>& items) {
  const size_t n = items.size();
  std::vector<uint64_t> mine(n), all(n * static_cast<size_t>(comm.size()));
  for (size_t i = 0; i < n; ++i) mine[i] = rng::purpose_hash(items[i].text);
  comm.allgather(mine.data(), all.data(), n * sizeof(uint64_t));
  for (int r = 1; r < comm.size(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (all[i] == all[static_cast<size_t>(r) * n + i]) continue;
      constexpr int kTag = 91;
      std::string detail;
      if (comm.rank() == r) {
        const uint64_t size = items[i].text.size();
        comm.send(&size, sizeof(size), 0, kTag);
        comm.send(items[i].text.data(), size, 0, kTag);
      } else if (comm.rank() == 0) {
        uint64_t size = 0;
        comm.recv(&size, sizeof(size), r, kTag);
        std::string theirs(size, '\0');
        comm.recv(theirs.data(), size, r, kTag);
        detail = ": " + first_difference(items[i].text, theirs, items[i].separator, r);
      }
      throw StartupError("ranks 0 and " + std::to_string(r) + " differ in " + items[i].what + detail, comm.rank() == 0);
    }
  }
}

void agree(Communicator& comm, const std::function<void()>& check) {
  std::string message;
  try {
    check();
  } catch (const std::bad_alloc&) {
    message = out_of_host_memory("start-up", kLowerTheModelOrMicroBatch);
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "unknown error";
  }
  // The lowest failing rank wins: max over (size - rank) of the failing ranks.
  int64_t flag = message.empty() ? 0 : comm.size() - comm.rank();
  comm.allreduce_max(&flag, 1);
  if (flag == 0) return;
  const int failing = comm.size() - static_cast<int>(flag);
  if (failing == comm.rank()) throw StartupError(message, true);
  throw StartupError("rank " + std::to_string(failing) + " failed during start-up", false);
}

void agree_after_sleeping(Communicator& comm, const std::string& waiting_for, const std::function<void()>& part) {
  std::string message;
  bool reportable = false;
  try {
    part();
  } catch (const StartupError& e) {
    message = e.what();
    reportable = e.report();
  } catch (const std::bad_alloc&) {
    message = out_of_host_memory("start-up", kLowerTheModelOrMicroBatch);
    reportable = true;
  } catch (const std::exception& e) {
    message = e.what();
    reportable = true;
  }
  sleeping_barrier(comm, waiting_for);
  // [0]: the lowest failing rank, [1]: the lowest rank whose own error is to be printed; each as
  // size - rank, so a maximum picks the lowest.
  int64_t flags[2] = {message.empty() ? 0 : comm.size() - comm.rank(),
                      message.empty() || !reportable ? 0 : comm.size() - comm.rank()};
  comm.allreduce_max(flags, 2);
  if (flags[0] == 0) return;
  const int teller = comm.size() - static_cast<int>(flags[1] != 0 ? flags[1] : flags[0]);
  if (teller == comm.rank()) throw StartupError(message, true);
  throw StartupError("rank " + std::to_string(teller) + " failed during start-up", false);
}

}  // namespace mgt
