#include "comm/mpi_communicator.hpp"

#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/host_name.hpp"
#include "base/stop_signal.hpp"
#include "io/console.hpp"
#include "kernels/cpu/bf16.hpp"
#include "mgtrain/error.hpp"

// Converts an MPI status code into the core's exception, with file and line.
#define MGT_MPI_CHECK(call)                                                                                      \
  do {                                                                                                           \
    const int mgt_rc_ = (call);                                                                                  \
    if (mgt_rc_ != MPI_SUCCESS) {                                                                                \
      char mgt_msg_[MPI_MAX_ERROR_STRING];                                                                       \
      int mgt_len_ = 0;                                                                                          \
      MPI_Error_string(mgt_rc_, mgt_msg_, &mgt_len_);                                                            \
      throw ::mgt::CommError(std::string(#call) + " failed at " __FILE__ ":" + std::to_string(__LINE__) + ": " + \
                             std::string(mgt_msg_, mgt_len_));                                                   \
    }                                                                                                            \
  } while (0)

namespace mgt {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  // MULTIPLE: when a deadline passes, the watchdog thread asks the other ranks who is still there
  // while the main thread sits in the collective it timed out in.
  int provided = 0;
  MGT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Errors come back as codes and become CommError, instead of Open MPI aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

namespace {

// bfloat16 sums for MPI: each pair added in FP32 and rounded back, as NCCL does.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  // Inline conversions (as kernels::to_bf16 and from_bf16): a call per element would cost more
  // than the sum, and the gradients' bfloat16 wire runs this over every bucket.
  const auto widen = [](uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  };
  for (int i = 0; i < *len; ++i) {
    const float sum = widen(a[i]) + widen(b[i]);
    uint32_t bits;
    std::memcpy(&bits, &sum, sizeof bits);
    b[i] = (bits & 0x7fffffffu) > 0x7f800000u ? uint16_t{0x7fff}
                                              : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

MPI_Datatype mpi_type(ElementType type) { return type == ElementType::f32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Op sum_op(ElementType type) {
  if (type == ElementType::f32) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op created;
    MPI_Op_create(&bf16_sum, /*commute=*/1, &created);
    return created;
  }();
  return op;
}

bool thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

// When a deadline passes, each rank that hit it tells the others so on a communicator of its own
// and listens for `grace_s`: ranks waiting in the same operation hit their deadline at about the
// same time and answer; a rank that never answers is the one stuck elsewhere (in I/O, stopped)
// or gone. `roll` spans the world, and each rank tells every rank of it: ranks stuck in
// collectives of different communicators (the step's stop agreement among the training ranks, the
// gradients among all) still hear each other. Listens to `members` (world ranks, indexed by the
// rank in the communicator that waits) and returns the indices of those never heard. Runs on the
// watchdog thread while the main thread is blocked in the collective (hence MPI_THREAD_MULTIPLE).
// After a deadline the process ends, so requests are left as they are; with `withdraw` (the
// process may go on) the receives still open are cancelled.
std::vector<int> silent_ranks(MPI_Comm roll, const std::vector<int>& members, double grace_s, bool withdraw = false) {
  int me = 0, world = 1;
  MPI_Comm_rank(roll, &me);
  MPI_Comm_size(roll, &world);
  constexpr int kTag = 7001;
  static const int here = 1;
  for (int r = 0; r < world; ++r) {
    if (r == me) continue;
    MPI_Request request;
    if (MPI_Isend(&here, 1, MPI_INT, r, kTag, roll, &request) == MPI_SUCCESS) MPI_Request_free(&request);
  }
  const size_t size = members.size();
  std::vector<int> heard(size, 0), notes(size);
  std::vector<MPI_Request> requests(size, MPI_REQUEST_NULL);
  int missing = 0;
  for (size_t i = 0; i < size; ++i) {
    if (members[i] == me) {
      heard[i] = 1;
      continue;
    }
    MPI_Irecv(&notes[i], 1, MPI_INT, members[i], kTag, roll, &requests[i]);
    ++missing;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < size; ++i) {
      int done = 0;
      if (heard[i] || requests[i] == MPI_REQUEST_NULL) continue;
      if (MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        heard[i] = 1;
        --missing;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<int> silent;
  for (size_t i = 0; i < size; ++i) {
    if (heard[i]) continue;
    silent.push_back(static_cast<int>(i));
    if (withdraw && requests[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&requests[i]);
      MPI_Request_free(&requests[i]);
    }
  }
  return silent;
}

// The roll call's communicator, shared by every communicator of the process: a duplicate of the
// world, made with the world's MpiCommunicator (the first one, and collective over all ranks).
// It lives until MPI_Finalize.
MPI_Comm world_roll_call = MPI_COMM_NULL;

// Ranks of `comm` in the numbering users see (mpirun's and the logs').
std::vector<int> world_ranks(MPI_Comm comm, const std::vector<int>& ranks) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> in_world(ranks.size());
  if (!ranks.empty())
    MPI_Group_translate_ranks(group, static_cast<int>(ranks.size()), ranks.data(), world, in_world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return in_world;
}

// Every rank's host name, indexed by its rank in `comm`. A collective.
std::vector<std::string> gather_host_names(MPI_Comm comm, int size) {
  constexpr size_t kNameBytes = 64;
  char mine[kNameBytes] = {};
  std::snprintf(mine, kNameBytes, "%s", host_name().c_str());
  std::vector<char> names(kNameBytes * static_cast<size_t>(size));
  MGT_MPI_CHECK(MPI_Allgather(mine, kNameBytes, MPI_CHAR, names.data(), kNameBytes, MPI_CHAR, comm));
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const char* name = names.data() + static_cast<size_t>(r) * kNameBytes;
    hosts.emplace_back(name, strnlen(name, kNameBytes));
  }
  return hosts;
}

// Where the ranks waited for run (numbered as `hosts`), for a timeout message: "; on node n1", or
// "; on node n2 (all of its ranks: the node or its link is lost)" when none of a node's ranks
// answered, which tells a lost node from a stuck rank. Only a node with several ranks here can
// show that: in a communicator of one rank per node (the leaders of a hierarchical all-reduce)
// one silent rank says nothing about the others.
std::string where_they_run(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  if (ranks.empty() || hosts.empty()) return "";
  std::vector<std::string> nodes;
  for (int r : ranks) {
    const std::string& host = hosts[static_cast<size_t>(r)];
    if (std::find(nodes.begin(), nodes.end(), host) == nodes.end()) nodes.push_back(host);
  }
  std::string out = nodes.size() == 1 ? "; on node " : "; on nodes ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto on_node = static_cast<size_t>(std::count(hosts.begin(), hosts.end(), nodes[i]));
    const auto silent_there = static_cast<size_t>(
        std::count_if(ranks.begin(), ranks.end(), [&](int r) { return hosts[static_cast<size_t>(r)] == nodes[i]; }));
    out += (i ? ", " : "") + nodes[i];
    if (silent_there == on_node && on_node > 1 && on_node < hosts.size())
      out += nodes.size() == 1 ? " (all of its ranks: the node or its link is lost)" : " (all of its ranks)";
  }
  return out;
}

// Ends the process when a blocking collective overruns its deadline. A blocking MPI call cannot
// be interrupted, and Open MPI's tuned blocking collectives measured faster than its non-blocking
// ones (docs/benchmarks.md), so collectives block and this thread enforces comm.timeout_s. The
// launcher of the job (mpirun, srun) then ends the other ranks.
// A launcher may end the job first: mpirun, when it loses a node's daemon, stops the other ranks
// with SIGTERM and kills them about a second later. A rank stuck in a collective for a while when
// that signal comes names, before it goes, the ranks it was waiting for (a short roll call), so
// the job's log says which ranks were lost, not only mpirun's node.
class Watchdog {
 public:
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  // The roll call's communicator at a deadline (MPI_COMM_NULL: the message says only that some
  // peer is stuck or gone), and the watched communicator's ranks' world ranks and host names.
  void set_roll_call(MPI_Comm roll, std::vector<int> members = {}, std::vector<std::string> hosts = {}) {
    std::lock_guard lock(mutex_);
    roll_ = roll;
    members_ = std::move(members);
    hosts_ = std::move(hosts);
  }

  void arm(const char* op, size_t count, double timeout_s, int64_t step, int rank) {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { watch(); });
    op_ = op;
    count_ = count;
    timeout_s_ = timeout_s;
    step_ = step;
    rank_ = rank;
    armed_at_ = std::chrono::steady_clock::now();
    deadline_ = armed_at_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(timeout_s));
    armed_ = true;
    wake_.notify_one();
  }
  void disarm() {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        wake_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      // Wakes every kSignalPoll to see a stop signal: a signal handler cannot notify.
      wake_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + kSignalPoll));
      if (stop_ || !armed_ || deadline_ != deadline) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now < deadline) {
        if (stop_signal() != 0 && !signal_reported_ && roll_ != MPI_COMM_NULL &&
            now - armed_at_ >= kStuckBeforeSignal) {
          signal_reported_ = true;
          report_stop_signal(std::chrono::duration<double>(now - armed_at_).count());
        }
        continue;
      }
      {  // The deadline passed: name whom this rank waited for, and end the process.
        std::string waiting_for = "the other ranks; a peer rank is stuck or gone";
        if (roll_ != MPI_COMM_NULL) {
          // Long enough for the ranks in the same operation to reach their own deadline.
          const double grace_s = std::clamp(timeout_s_ / 3, 1.0, 10.0);
          const std::vector<int> silent = silent_ranks(roll_, members_, grace_s);
          waiting_for = silent.empty()
                            ? "the other ranks, which all wait too (different operations, or a stuck network)"
                            : std::string(silent.size() == 1 ? "rank " : "ranks ") + rank_list(in_world(silent)) +
                                  ", which never reached it: stuck or gone" + where_they_run(silent, hosts_);
        }
        const std::string size = count_ > 0 ? " of " + std::to_string(count_) + " elements" : "";
        char line[1024];
        std::snprintf(line, sizeof line,
                      "mgtrain: error: [rank %d] timed out after %.0f s at step %lld in %s%s, waiting "
                      "for %s (comm.timeout_s)\n",
                      rank_, timeout_s_, static_cast<long long>(step_), op_, size.c_str(), waiting_for.c_str());
        console::final_line(line);
        std::_Exit(1);
      }
    }
  }

  // A stop signal while this rank has waited at least kStuckBeforeSignal in one collective: most
  // likely the launcher ending a job that is stuck (collectives of a healthy job take
  // milliseconds), though a polite stop can come while a peer writes a long checkpoint, so the line
  // says what it saw, not why. The roll call has kSignalGrace, within the second before SIGKILL.
  static constexpr std::chrono::milliseconds kSignalPoll{100}, kStuckBeforeSignal{2000};
  static constexpr double kSignalGrace = 0.4;

  void report_stop_signal(double waited_s) {
    const std::vector<int> silent = silent_ranks(roll_, members_, kSignalGrace, /*withdraw=*/true);
    if (silent.empty()) return;
    const std::string size = count_ > 0 ? " of " + std::to_string(count_) + " elements" : "";
    char line[1024];
    std::snprintf(line, sizeof line,
                  "mgtrain: [rank %d] signal %d came after %.0f s waiting at step %lld in %s%s for %s %s, which did "
                  "not answer a roll call: stuck or gone%s\n",
                  rank_, stop_signal(), waited_s, static_cast<long long>(step_), op_, size.c_str(),
                  silent.size() == 1 ? "rank" : "ranks", rank_list(in_world(silent)).c_str(),
                  where_they_run(silent, hosts_).c_str());
    console::warning(line);
  }

  // The world ranks of ranks numbered in the watched communicator.
  std::vector<int> in_world(const std::vector<int>& ranks) const {
    std::vector<int> out;
    for (int r : ranks) out.push_back(members_[static_cast<size_t>(r)]);
    return out;
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  bool stop_ = false, armed_ = false, signal_reported_ = false;
  const char* op_ = "";
  size_t count_ = 0;
  double timeout_s_ = 0;
  int64_t step_ = 0;
  int rank_ = 0;
  std::chrono::steady_clock::time_point armed_at_, deadline_;
  MPI_Comm roll_ = MPI_COMM_NULL;
  std::vector<int> members_;
  std::vector<std::string> hosts_;
};

class MpiRequest;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm base) {
    MGT_MPI_CHECK(MPI_Comm_dup(base, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Node-local rank from shared-memory domains: right under mpirun, srun and any PMI launcher.
    MGT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_));
    MPI_Comm_rank(local_, &local_rank_);
    MPI_Comm_size(local_, &local_size_);
    MPI_Comm leaders;
    MGT_MPI_CHECK(MPI_Comm_split(comm_, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders));
    if (local_rank_ == 0) {
      MPI_Comm_rank(leaders, &node_);
      MPI_Comm_free(&leaders);
    }
    MGT_MPI_CHECK(MPI_Bcast(&node_, 1, MPI_INT, 0, local_));
    // A timeout then names the node of the ranks it waited for, not only their numbers.
    hosts_ = gather_host_names(comm_, size_);
    if (thread_multiple()) {
      if (base == MPI_COMM_WORLD && world_roll_call == MPI_COMM_NULL)
        MGT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_roll_call));
      std::vector<int> ranks(static_cast<size_t>(size_));
      for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
      if (world_roll_call != MPI_COMM_NULL) watchdog_.set_roll_call(world_roll_call, world_ranks(comm_, ranks), hosts_);
    }
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      watchdog_.set_roll_call(MPI_COMM_NULL);
      MPI_Comm_free(&local_);
      MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int node() const override { return node_; }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, size_t count) override {
    Guarded g(*this, "allreduce (floats)", count);
    MGT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_));
  }
  void allreduce_sum(double* data, size_t count) override {
    Guarded g(*this, "allreduce (doubles)", count);
    MGT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm_));
  }
  void allreduce_max(int64_t* data, size_t count) override {
    Guarded g(*this, "allreduce-max (integers)", count);
    MGT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_INT64_T, MPI_MAX, comm_));
  }
  std::unique_ptr<CommRequest> iallreduce_sum(float* data, size_t count) override;
  void allreduce_sum(void* data, size_t count, ElementType type) override {
    Guarded g(*this, type == ElementType::f32 ? "allreduce (floats)" : "allreduce (bfloat16)", count);
    MGT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(type), sum_op(type), comm_));
  }
  void reduce_scatter_sum(const void* send, void* recv, size_t count, ElementType type) override {
    Guarded g(*this, type == ElementType::f32 ? "reduce-scatter (floats)" : "reduce-scatter (bfloat16)", count);
    MGT_MPI_CHECK(MPI_Reduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                                           mpi_type(type), sum_op(type), comm_));
  }
  void reduce_sum(void* data, size_t count, ElementType type, int root) override {
    Guarded g(*this, type == ElementType::f32 ? "reduce (floats)" : "reduce (bfloat16)", count);
    MGT_MPI_CHECK(MPI_Reduce(rank_ == root ? MPI_IN_PLACE : data, data, static_cast<int>(count), mpi_type(type),
                             sum_op(type), root, comm_));
  }
  std::unique_ptr<CommRequest> iallreduce_sum_typed(void* data, size_t count, ElementType type) override;
  std::unique_ptr<CommRequest> ireduce_sum(void* data, size_t count, ElementType type, int root) override;
  std::unique_ptr<CommRequest> ibroadcast(void* data, size_t bytes, int root) override;
  using Communicator::allgather;
  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dest, int tag) override;
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int source, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part;
    MGT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &part));
    auto sub = std::make_unique<MpiCommunicator>(part);
    MPI_Comm_free(&part);
    sub->set_timeout_seconds(timeout_s_);
    return sub;
  }

  void broadcast(void* data, size_t bytes, int root) override {
    Guarded g(*this, "broadcast (bytes)", bytes);
    MGT_MPI_CHECK(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_));
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    Guarded g(*this, "allgather (bytes)", bytes);
    MGT_MPI_CHECK(
        MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_));
  }
  void send(const void* data, size_t bytes, int dest, int tag) override {
    MPI_Request r;
    MGT_MPI_CHECK(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, comm_, &r));
    wait(r, "send (bytes)", bytes, dest);
  }
  void recv(void* data, size_t bytes, int source, int tag) override {
    MPI_Request r;
    MGT_MPI_CHECK(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, source, tag, comm_, &r));
    wait(r, "receive (bytes)", bytes, source);
  }
  void barrier() override {
    Guarded g(*this, "barrier", 0);
    MGT_MPI_CHECK(MPI_Barrier(comm_));
  }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

  // Polls the request until it completes or the deadline passes. Yielding between polls keeps
  // oversubscribed ranks (more ranks than cores) from starving the peer they wait for.
  // A blocking collective under the watchdog's deadline; counted for tests.
  struct Guarded {
    Guarded(MpiCommunicator& c, const char* op, size_t count) : comm(c) {
      ++c.collective_count_;
      c.watchdog_.arm(op, count, c.timeout_s_, c.step_, c.rank_);
    }
    ~Guarded() { comm.watchdog_.disarm(); }
    MpiCommunicator& comm;
  };

  // `op` names the operation in a timeout message, with `count` elements and the peer rank
  // (-1: all ranks); the message is built only on failure, so waits do not allocate.
  void wait(MPI_Request& request, const char* op, size_t count, int peer = -1) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    int done = 0;
    for (unsigned polls = 0;; ++polls) {
      MGT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if ((polls & 63) == 63 && std::chrono::steady_clock::now() > deadline)
        // Worded as the watchdog's message; the launcher prefixes the rank.
        throw CommError("timed out after " + std::to_string(static_cast<int>(timeout_s_)) + " s at step " +
                        std::to_string(step_) + " in " + op + " of " + std::to_string(count) +
                        " elements, waiting for " +
                        (peer < 0 ? std::string("the other ranks; a peer rank is stuck or gone")
                                  : "rank " + std::to_string(peer) + ", which never answered: stuck or gone" +
                                        where_they_run({peer}, hosts_)) +
                        " (comm.timeout_s)");
      sched_yield();
    }
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_ = 0;
  std::vector<std::string> hosts_;  // each rank's host name
  Watchdog watchdog_;
};

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(MpiCommunicator& comm, MPI_Request request, size_t count,
             const char* op = "non-blocking allreduce (floats)", int peer = -1)
      : comm_(comm), request_(request), count_(count), op_(op), peer_(peer) {}
  ~MpiRequest() override {
    if (done_) return;
    if (std::uncaught_exceptions() > 0) {
      // The job is failing: do not wait out another deadline, withdraw the request instead.
      MPI_Cancel(&request_);
      MPI_Request_free(&request_);
      return;
    }
    // Never leave MPI with a request into memory that may go away.
    try {
      wait();
    } catch (...) {
    }
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MGT_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    done_ = flag != 0;
    return done_;
  }
  void wait() override {
    if (done_) return;
    comm_.wait(request_, op_, count_, peer_);
    done_ = true;
  }

 private:
  MpiCommunicator& comm_;
  MPI_Request request_;
  size_t count_;
  const char* op_;
  int peer_;
  bool done_ = false;
};

std::unique_ptr<CommRequest> MpiCommunicator::iallreduce_sum(float* data, size_t count) {
  MPI_Request r;
  MGT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_, &r));
  ++collective_count_;
  return std::make_unique<MpiRequest>(*this, r, count);
}

std::unique_ptr<CommRequest> MpiCommunicator::iallreduce_sum_typed(void* data, size_t count, ElementType type) {
  MPI_Request r;
  MGT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(type), sum_op(type), comm_, &r));
  ++collective_count_;
  return std::make_unique<MpiRequest>(
      *this, r, count,
      type == ElementType::f32 ? "non-blocking allreduce (floats)" : "non-blocking allreduce (bfloat16)");
}

std::unique_ptr<CommRequest> MpiCommunicator::ireduce_sum(void* data, size_t count, ElementType type, int root) {
  MPI_Request r;
  MGT_MPI_CHECK(MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : data, data, static_cast<int>(count), mpi_type(type),
                            sum_op(type), root, comm_, &r));
  ++collective_count_;
  return std::make_unique<MpiRequest>(
      *this, r, count, type == ElementType::f32 ? "non-blocking reduce (floats)" : "non-blocking reduce (bfloat16)");
}

std::unique_ptr<CommRequest> MpiCommunicator::ibroadcast(void* data, size_t bytes, int root) {
  MPI_Request r;
  MGT_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &r));
  ++collective_count_;
  return std::make_unique<MpiRequest>(*this, r, bytes, "non-blocking broadcast (bytes)");
}

std::unique_ptr<CommRequest> MpiCommunicator::isend(const void* data, size_t bytes, int dest, int tag) {
  MPI_Request r;
  MGT_MPI_CHECK(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, comm_, &r));
  return std::make_unique<MpiRequest>(*this, r, bytes, "send (bytes)", dest);
}

std::unique_ptr<CommRequest> MpiCommunicator::irecv(void* data, size_t bytes, int source, int tag) {
  MPI_Request r;
  MGT_MPI_CHECK(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, source, tag, comm_, &r));
  return std::make_unique<MpiRequest>(*this, r, bytes, "receive (bytes)", source);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD); }

void sleeping_barrier(const Communicator& comm, const std::string& waiting_for) {
  MPI_Request request;
  MGT_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &request));
  const double timeout_s = comm.timeout_seconds();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int done = 0;
  const timespec pause{0, 1000000};
  while (true) {
    MGT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    // A rank that never arrives (it failed, or hangs) must not keep the others here for ever.
    if (std::chrono::steady_clock::now() > deadline) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.0f", timeout_s);
      throw CommError(std::string("timed out after ") + seconds + " s in a barrier, waiting for " + waiting_for +
                      " (comm.timeout_s)");
    }
    nanosleep(&pause, nullptr);
  }
}

std::unique_ptr<Communicator> make_mpi_self_communicator() { return std::make_unique<MpiCommunicator>(MPI_COMM_SELF); }

}  // namespace mgt
