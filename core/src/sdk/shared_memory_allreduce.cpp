#include "shared_memory_allreduce.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/idle_core.hpp"
#include "kernels/cpu/cache_lines.hpp"
#include "kernels/cpu/pointwise.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace {

constexpr size_t kLine = 64;                           // bytes: a cache line
constexpr size_t kLineFloats = kLine / sizeof(float);  // parts and slots start on a line of their own

constexpr size_t kSummedValues = 3;  // sum_over_ranks' values that fit beside a generation

// One per local rank at the start of the mapping, a line each so that ranks announcing their
// arrival do not invalidate each other's. Beside the generation, the values the rank adds to
// sum_over_ranks, two sets alternating by barrier: a rank writes a set again only after the next
// barrier, which every rank reaches only after it has read that set.
struct alignas(kLine) Arrival {
  std::atomic<uint64_t> generation;
  double values[2][kSummedValues];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the barrier needs lock-free 64-bit atomics");

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t header_bytes(int local_size) { return round_up(sizeof(Arrival) * static_cast<size_t>(local_size), kLine); }

Arrival* arrivals(void* mapping) { return static_cast<Arrival*>(mapping); }

// A local rank's part of `count` floats: an equal share, in whole cache lines.
size_t part_of(size_t count, int local_size) {
  const auto ranks = static_cast<size_t>(local_size);
  return round_up((count + ranks - 1) / ranks, kLineFloats);
}

// Polls of a barrier (each yields the core) before it lends the core to the reader
// (idle_core.hpp): most waits at the update's two barriers end within them, and a
// hand-over and back costs two context switches, more than a wait that short; past them, the
// sooner the reader has the core the better (docs/benchmarks.md, "Shared memory between cores").
constexpr unsigned kSpinsBeforeLending = 2;

// Floats summed at a time, a block that stays in the L1 cache.
constexpr size_t kBlock = 1024;

// The shared update's slots come in two sets, used by turns, up to this size of a slot: a line
// is then written two steps after another core last read it, by when it has left that core's own
// caches, and the copies into the slots may use ordinary stores (slot_writes.hpp). Larger slots
// keep one set and streamed stores: their lines are expected to leave the other cores' own caches
// between steps anyway (not measured), and a second set would cost that much more /dev/shm.
constexpr size_t kTwoSetsUpToBytes = size_t{16} << 20;

}  // namespace

std::unique_ptr<SharedMemoryAllreduce> SharedMemoryAllreduce::create(Communicator& comm, size_t count,
                                                                     std::string& why_not, bool with_params) {
  std::unique_ptr<SharedMemoryAllreduce> self(new SharedMemoryAllreduce);
  self->comm_ = &comm;
  // This node's ranks, by local rank: for setting up only (the barriers run in the memory itself).
  const std::unique_ptr<Communicator> node = comm.split(comm.node(), comm.local_rank());
  self->local_rank_ = node->rank();
  self->local_size_ = node->size();
  int64_t sizes[2] = {self->local_size_, -self->local_size_};
  comm.allreduce_max(sizes, 2);
  const bool uniform = sizes[0] == -sizes[1];
  const bool across_nodes = self->local_size_ != comm.size();
  // Every rank takes part in the splits below, whatever the outcome.
  if (across_nodes) self->rail_ = comm.split(comm.local_rank(), comm.node());
  self->world_rank_of_local_.assign(static_cast<size_t>(self->local_size_), 0);
  const int world_rank = comm.rank();
  node->allgather(&world_rank, self->world_rank_of_local_.data(), sizeof(int));

  MGT_CHECK(!with_params || !across_nodes, Error, "shared-memory parameters across nodes");
  const size_t local = static_cast<size_t>(self->local_size_);
  self->count_ = std::max<size_t>(count, 1);
  self->part_floats_ = part_of(self->count_, self->local_size_);
  self->slot_floats_ = self->part_floats_ * local;
  self->with_params_ = with_params;
  self->block_terms_.resize(local);
  // The slots, then the parameters, then the slots' second set.
  const auto bytes_with = [&](int sets) {
    const size_t regions = local + (with_params ? 1 : 0) + static_cast<size_t>(sets - 1) * local;
    return header_bytes(self->local_size_) + regions * self->slot_floats_ * sizeof(float);
  };
  int sets = with_params && self->slot_floats_ * sizeof(float) <= kTwoSetsUpToBytes ? 2 : 1;

  // Local rank 0 creates it under a name no other job uses; the others open that name; once every
  // rank has tried, the name goes, so nothing is left in /dev/shm whatever happens to the job.
  // Local rank 0 also settles the number of sets: one where two do not fit.
  struct {
    char name[64];
    int sets;
  } made = {};
  char* const name = made.name;
  std::string error;
  int fd = -1;
  if (self->local_rank_ == 0) {
    std::random_device random;
    std::snprintf(name, sizeof made.name, "/mgtrain-%ld-%08x%08x", static_cast<long>(getpid()), random(), random());
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate reserves the pages now: a full /dev/shm is an error here, not a SIGBUS later.
    int fallocate_error = 0;
    if (fd >= 0 && sets == 2 && posix_fallocate(fd, 0, static_cast<off_t>(bytes_with(2))) != 0) {
      sets = 1;  // the second set is worth a few percent, not the path through MPI
      if (ftruncate(fd, 0) != 0) fallocate_error = errno;
    }
    if (fd < 0 || fallocate_error != 0 ||
        (fallocate_error = posix_fallocate(fd, 0, static_cast<off_t>(bytes_with(sets)))) != 0) {
      const size_t bytes = bytes_with(sets);
      error = std::string("could not create ") + std::to_string(bytes) + " bytes of shared memory '" + name +
              "': " + std::strerror(fd < 0 ? errno : fallocate_error);
      if (fd >= 0) {
        shm_unlink(name);
        close(fd);
        fd = -1;
      }
      name[0] = '\0';
    }
  }
  made.sets = sets;
  node->broadcast(&made, sizeof made, 0);
  self->slot_sets_ = made.sets;
  self->way_ = self->next_way();
  const size_t bytes = bytes_with(made.sets);
  if (self->local_rank_ != 0 && name[0] != '\0') {
    fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) error = std::string("could not open shared memory '") + name + "': " + std::strerror(errno);
  }
  if (fd >= 0) {
    void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED)
      error = "could not map " + std::to_string(bytes) + " bytes of shared memory: " + std::strerror(errno);
    else
      self->mapping_ = std::shared_ptr<void>(mapping, [bytes](void* p) { munmap(p, bytes); });
    close(fd);
  }
  if (with_params && error.empty()) {
    // Zero past `count`, as the slots are: the last rank's part reaches into the padding.
    const size_t own_bytes = self->slot_floats_ * sizeof(float);
    if (void* own = std::aligned_alloc(kLine, round_up(own_bytes, kLine))) {
      std::memset(own, 0, own_bytes);
      self->own_gradients_ = std::shared_ptr<void>(own, std::free);
    } else {
      error = "could not allocate " + std::to_string(own_bytes) + " bytes for the gradients";
    }
  }
  int64_t failed = error.empty() ? 0 : 1;
  comm.allreduce_max(&failed, 1);
  if (self->local_rank_ == 0 && name[0] != '\0') shm_unlink(name);
  if (!uniform) {
    why_not = "the nodes run different numbers of ranks (" + std::to_string(-sizes[1]) + " to " +
              std::to_string(sizes[0]) + ")";
    return nullptr;
  }
  if (failed) {
    why_not = error.empty() ? "another rank could not set up shared memory" : error;
    return nullptr;
  }
  return self;
}

SharedMemoryAllreduce::~SharedMemoryAllreduce() = default;

float* SharedMemoryAllreduce::region(int index) const {
  return reinterpret_cast<float*>(static_cast<char*>(mapping_.get()) + header_bytes(local_size_)) +
         static_cast<size_t>(index) * slot_floats_;
}

float* SharedMemoryAllreduce::slot(int local_rank, int set) const {
  return region(set == 0 ? local_rank : local_size_ + 1 + local_rank);
}

float* SharedMemoryAllreduce::params() const { return with_params_ ? region(local_size_) : nullptr; }

void SharedMemoryAllreduce::barrier(const char* what, size_t count) {
  ++generation_;
  Arrival* arrival = arrivals(mapping_.get());
  // Release: what this rank wrote before is visible to a rank that sees the new generation.
  arrival[local_rank_].generation.store(generation_, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(comm_->timeout_seconds());
  for (unsigned polls = 0;; ++polls) {
    if (all_arrived()) return;
    // Past a short spin (the usual skew between ranks), the rank's reader thread may have this
    // core until the others arrive: its work, done here, is not done at the start of a step.
    if (polls >= kSpinsBeforeLending)
      IdleCore::lend_until(
          [](const void* self) { return static_cast<const SharedMemoryAllreduce*>(self)->all_arrived(); }, this);
    if ((polls & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
      std::string ranks;
      int waiting = 0;
      for (int r = 0; r < local_size_; ++r)
        if (arrival[r].generation.load(std::memory_order_acquire) < generation_) {
          ranks += (waiting++ == 0 ? "" : ", ") + std::to_string(world_rank_of_local_[static_cast<size_t>(r)]);
        }
      if (waiting > 0)  // else the last of them arrived since the poll above
        // Worded as the communicator's timeouts; the launcher prefixes the rank.
        throw CommError("timed out after " + std::to_string(static_cast<int>(comm_->timeout_seconds())) +
                        " s at step " + std::to_string(comm_->step()) + " in shared-memory " + what + " of " +
                        std::to_string(count) + " elements, waiting for " + (waiting == 1 ? "rank " : "ranks ") +
                        ranks + ", which never reached it: stuck or gone; on this node (comm.timeout_s)");
    }
    // More ranks than cores: the rank waited for may need this core.
    sched_yield();
  }
}

bool SharedMemoryAllreduce::all_arrived() const {
  const Arrival* arrival = arrivals(mapping_.get());
  for (int r = 0; r < local_size_; ++r)
    if (arrival[r].generation.load(std::memory_order_acquire) < generation_) return false;
  return true;
}

void SharedMemoryAllreduce::allreduce_sum(float* data, size_t offset, size_t count) {
  MGT_CHECK(offset + count <= slot_floats_, CommError,
            "shared-memory allreduce of [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                "), set up for " + std::to_string(slot_floats_) + " elements");
  comm_->count_collective();
  float* mine = slot(local_rank_) + offset;
  const bool in_place = data == mine;
  if (!in_place) std::memcpy(mine, data, count * sizeof(float));
  barrier("allreduce", count);
  // This rank's part, whole cache lines where the range starts on one (parameters do).
  const size_t part = part_of(count, local_size_);
  const size_t begin = std::min(count, part * static_cast<size_t>(local_rank_));
  const size_t end = std::min(count, begin + part);
  // A block at a time, while it is in the L1 cache: the sum over the slots into this rank's slot,
  // then (on one node) copied into the others. Across nodes the node's sum in this rank's slot is
  // all-reduced with the other nodes first.
  float* own = slot(local_rank_);
  for (size_t at = offset + begin; at < offset + end; at += kBlock) {
    const size_t n = std::min(kBlock, offset + end - at);
    sum_block(at, n, offset + end, own, own + at, 0);
    for (int r = 0; r < local_size_; ++r)
      if (!rail_ && r != local_rank_) std::copy(own + at, own + at + n, slot(r) + at);
  }
  if (rail_ && begin < end) {
    // Every node has the same parts, so the ranks of a rail agree on whether theirs is empty.
    rail_->allreduce_sum(mine + begin, end - begin);
    for (int r = 0; r < local_size_; ++r)
      if (r != local_rank_) std::copy(mine + begin, mine + end, slot(r) + offset + begin);
  }
  barrier("allreduce", count);
  if (!in_place) std::memcpy(data, mine, count * sizeof(float));
}

void SharedMemoryAllreduce::reduce_scatter_sum() {
  MGT_CHECK(with_params_, Error, "shared-memory reduce-scatter without the parameters' region");
  comm_->count_collective();
  float* const mine = gradients();  // where backward wrote, by way_
  set_ = (set_ + 1) % slot_sets_;   // every rank turns alike: the call is collective
  if (way_ != SlotWrites::Kind::direct) {
    float* into = slot(local_rank_, set_);
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < local_size_; ++r) {
      const size_t from = std::min(count_, part_floats_ * static_cast<size_t>(r));
      const size_t to = std::min(count_, from + part_floats_);
      if (r == local_rank_ || from >= to) continue;
      if (way_ == SlotWrites::Kind::plain)
        std::memcpy(into + from, mine + from, (to - from) * sizeof(float));
      else
        kernels::stream_copy(into + from, mine + from, to - from);
    }
    kernels::stream_fence();  // in memory before the barrier's release
    writes_.took(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  barrier("reduce-scatter", count_);
  // As allreduce_sum over [0, count_): the same parts, the same order of the terms.
  const size_t begin = std::min(count_, part_begin());
  const size_t end = std::min(count_, begin + part_floats_);
  for (size_t at = begin; at < end; at += kBlock) sum_block(at, std::min(kBlock, end - at), end, mine, mine + at, set_);
  summed_ = mine;
  way_ = next_way();
}

// With one set the lines were read by the others last step: only streamed stores spare the wait.
SlotWrites::Kind SharedMemoryAllreduce::next_way() {
  return slot_sets_ == 2 ? writes_.next() : SlotWrites::Kind::streamed;
}

float* SharedMemoryAllreduce::gradients() const {
  if (!own_gradients_) return slot();
  if (way_ == SlotWrites::Kind::direct) return slot(local_rank_, (set_ + 1) % slot_sets_);
  return static_cast<float*>(own_gradients_.get());
}

std::vector<float*> SharedMemoryAllreduce::gradient_places() const {
  if (!own_gradients_) return {slot()};
  std::vector<float*> places{static_cast<float*>(own_gradients_.get())};
  for (int set = 0; set < slot_sets_; ++set) places.push_back(slot(local_rank_, set));
  return places;
}

void SharedMemoryAllreduce::sum_block(size_t at, size_t n, size_t end, const float* own, float* out, int set) const {
  // The next block of the other ranks' slots, which their cores wrote, is asked for before this
  // one is summed: those lines come from the other cores, and the requests then overlap.
  for (int r = 0; r < local_size_; ++r)
    if (r != local_rank_)
      for (size_t ahead = at + n; ahead < std::min(end, at + n + kBlock); ahead += kLineFloats)
        __builtin_prefetch(slot(r, set) + ahead, 0, 3);
  for (int r = 0; r < local_size_; ++r)
    block_terms_[static_cast<size_t>(r)] = (r == local_rank_ ? own : slot(r, set)) + at;
  kernels::sum_terms(block_terms_.data(), block_terms_.size(), out, n);
}

void SharedMemoryAllreduce::sum_over_ranks(double* values, size_t n) {
  if (n > kSummedValues) {  // more than the arrival line holds
    comm_->allreduce_sum(values, n);
    return;
  }
  Arrival* arrival = arrivals(mapping_.get());
  const size_t set = (generation_ + 1) % 2;  // the set of the barrier below
  std::copy(values, values + n, arrival[local_rank_].values[set]);
  barrier("sum of the step's checks", n);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < local_size_; ++r) sum += arrival[r].values[set][i];
    values[i] = sum;
  }
}

void SharedMemoryAllreduce::wait_for_parts() { barrier("parameter update", count_); }

}  // namespace mgt
