#include "comm/staged_communicator.hpp"

#include <cstdlib>
#include <vector>

namespace mgt {

namespace {

// The operation already finished when the call returned.
class DoneRequest final : public CommRequest {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(Communicator& host, kernels::Backend& backend, std::unique_ptr<Communicator> owned = nullptr)
      : host_(host), backend_(backend), owned_(std::move(owned)) {
    timeout_s_ = host.timeout_seconds();
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  int node() const override { return host_.node(); }
  std::string backend() const override { return host_.backend() + " (staged through host memory)"; }

  void allreduce_sum(float* data, size_t count) override {
    reduce(data, count, [&](auto* h) { host_.allreduce_sum(h, count); });
  }
  void allreduce_sum(double* data, size_t count) override {
    reduce(data, count, [&](auto* h) { host_.allreduce_sum(h, count); });
  }
  void allreduce_max(int64_t* data, size_t count) override {
    reduce(data, count, [&](auto* h) { host_.allreduce_max(h, count); });
  }
  std::unique_ptr<CommRequest> iallreduce_sum(float* data, size_t count) override {
    allreduce_sum(data, count);
    return std::make_unique<DoneRequest>();
  }
  void allreduce_sum(void* data, size_t count, ElementType type) override {
    const size_t bytes = count * element_bytes(type);
    reduce(static_cast<char*>(data), bytes, [&](char* h) { host_.allreduce_sum(h, count, type); });
  }
  void reduce_scatter_sum(const void* send, void* recv, size_t count, ElementType type) override {
    sync_host();
    ++collective_count_;
    const size_t block = count * element_bytes(type), all = block * static_cast<size_t>(size());
    staging_.resize(all + block);
    backend_.download(staging_.data(), send, all);
    host_.reduce_scatter_sum(staging_.data(), staging_.data() + all, count, type);
    backend_.upload(recv, staging_.data() + all, block);
  }
  using Communicator::allgather;
  void broadcast(void* data, size_t bytes, int root) override {
    reduce(static_cast<char*>(data), bytes, [&](char* h) { host_.broadcast(h, bytes, root); });
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    sync_host();
    ++collective_count_;
    if (size() == 1) {  // a copy on the device, which a CUDA graph can record
      backend_.copy(recv, send, bytes);
      return;
    }
    staging_.resize(bytes * (1 + static_cast<size_t>(size())));
    backend_.download(staging_.data(), send, bytes);
    host_.allgather(staging_.data(), staging_.data() + bytes, bytes);
    backend_.upload(recv, staging_.data() + bytes, bytes * static_cast<size_t>(size()));
  }
  void send(const void* data, size_t bytes, int dest, int tag) override {
    staging_.resize(bytes);
    backend_.download(staging_.data(), data, bytes);
    host_.send(staging_.data(), bytes, dest, tag);
  }
  void recv(void* data, size_t bytes, int source, int tag) override {
    staging_.resize(bytes);
    host_.recv(staging_.data(), bytes, source, tag);
    backend_.upload(data, staging_.data(), bytes);
  }
  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dest, int tag) override {
    send(data, bytes, dest, tag);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int source, int tag) override {
    recv(data, bytes, source, tag);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto part = host_.split(color, key);
    Communicator& host = *part;
    return std::make_unique<StagedCommunicator>(host, backend_, std::move(part));
  }
  void barrier() override { host_.barrier(); }
  [[noreturn]] void abort(int exit_code) override {
    host_.abort(exit_code);
    std::_Exit(exit_code);  // host.abort does not return; a virtual call cannot promise so
  }

 private:
  // The host communicator's deadline and step names follow this one's.
  void sync_host() {
    host_.set_timeout_seconds(timeout_s_);
    host_.set_step(step_);
  }

  // Device buffer -> host, the host collective in place, -> device. One rank's collective leaves
  // the data as it is: nothing goes through the host, so a CUDA graph can record the step.
  template <typename T, typename Collective>
  void reduce(T* data, size_t count, Collective collective) {
    if (count == 0) return;
    sync_host();
    ++collective_count_;
    if (size() == 1) return;
    const size_t bytes = count * sizeof(T);
    staging_.resize(bytes);  // grows to the largest bucket once, then stays
    backend_.download(staging_.data(), data, bytes);
    collective(reinterpret_cast<T*>(staging_.data()));
    backend_.upload(data, staging_.data(), bytes);
  }

  Communicator& host_;
  kernels::Backend& backend_;
  std::unique_ptr<Communicator> owned_;  // a split's host part
  std::vector<char> staging_;
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, kernels::Backend& backend) {
  return std::make_unique<StagedCommunicator>(host, backend);
}

}  // namespace mgt
