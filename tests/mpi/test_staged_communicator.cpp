// The staged communicator under mpirun, over the CPU backend's memory (on a GPU the same code
// copies through cudaMemcpy): every collective gives what the host communicator gives, and a
// split part works on its own ranks.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/staged_communicator.hpp"
#include "kernels/backend.hpp"
#include "mpi_check.hpp"

using mpi_check::check;

namespace {

// A buffer in the backend's memory, filled from and read back to the host through the backend.
template <typename T>
struct BackendBuffer {
  BackendBuffer(mgt::kernels::Backend& b, const std::vector<T>& values)
      : backend(b), size(values.size()), data(static_cast<T*>(b.allocate(values.size() * sizeof(T)))) {
    b.upload(data, values.data(), size * sizeof(T));
  }
  ~BackendBuffer() { backend.release(data); }
  std::vector<T> host() const {
    std::vector<T> out(size);
    backend.download(out.data(), data, size * sizeof(T));
    return out;
  }
  mgt::kernels::Backend& backend;
  size_t size;
  T* data;
};

}  // namespace

int main(int argc, char** argv) {
  mgt::MpiRuntime mpi(&argc, &argv);
  auto host = mgt::make_mpi_communicator();
  host->set_timeout_seconds(60);
  auto backend = mgt::kernels::make_cpu_backend();
  auto comm = mgt::make_staged_communicator(*host, *backend);
  const int rank = comm->rank(), size = comm->size();
  check(size >= 2 && comm->local_rank() == host->local_rank(), "rank, size and local rank are the host's", rank);

  {
    // Reduce-scatter of backend memory through the host, and a bfloat16 all-reduce.
    const size_t block = 300;
    std::vector<float> blocks(block * static_cast<size_t>(size));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(rank + static_cast<int>(i % 3));
    BackendBuffer<float> send(*backend, blocks), recv(*backend, std::vector<float>(block));
    comm->reduce_scatter_sum(send.data, recv.data, block, mgt::ElementType::f32);
    const auto got = recv.host();
    bool ok = true;
    for (size_t i = 0; i < block; ++i)
      ok = ok && got[i] == static_cast<float>(size * (size - 1) / 2 +
                                              size * static_cast<int>((static_cast<size_t>(rank) * block + i) % 3));
    check(ok, "reduce_scatter_sum of floats in backend memory", rank);
    BackendBuffer<uint16_t> half(*backend, std::vector<uint16_t>(64, 0x3f80));  // 1.0 in bfloat16
    comm->allreduce_sum(half.data, half.size, mgt::ElementType::bf16);
    check(half.host()[0] == (size == 2 ? 0x4000 : 0x4080), "allreduce_sum of bfloat16 in backend memory", rank);
  }

  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 18}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + static_cast<int>(i % 7));
    BackendBuffer<float> d(*backend, v);
    comm->allreduce_sum(d.data, n);
    const auto got = d.host();
    bool ok = true;
    for (size_t i = 0; i < n; ++i)
      ok = ok && got[i] == static_cast<float>(size * (size - 1) / 2 + size * static_cast<int>(i % 7));
    check(ok, "allreduce_sum of " + std::to_string(n) + " floats in backend memory", rank);
  }

  BackendBuffer<double> dd(*backend, {0.5, static_cast<double>(rank)});
  auto request = comm->iallreduce_sum(reinterpret_cast<float*>(dd.data), 0);  // zero floats: nothing
  request->wait();
  comm->allreduce_sum(dd.data, 2);
  const auto doubles = dd.host();
  check(doubles[0] == 0.5 * size && doubles[1] == size * (size - 1) / 2.0, "allreduce_sum of doubles", rank);

  BackendBuffer<int64_t> dm(*backend, {int64_t{rank} * 10});
  comm->allreduce_max(dm.data, 1);
  check(dm.host()[0] == (size - 1) * 10, "allreduce_max", rank);

  BackendBuffer<float> bucket(*backend, std::vector<float>(5000, 1.0f));
  comm->iallreduce_sum(bucket.data, bucket.size)->wait();
  bool all = true;
  for (float x : bucket.host()) all = all && x == static_cast<float>(size);
  check(all, "iallreduce_sum completes before wait returns", rank);

  BackendBuffer<int> b(*backend, {rank == 1 ? 4242 : -1});
  comm->broadcast(b.data, sizeof(int), 1);
  check(b.host()[0] == 4242, "broadcast from rank 1", rank);

  BackendBuffer<int> mine(*backend, {rank * 3, rank * 3 + 1});
  BackendBuffer<int> gathered(*backend, std::vector<int>(2 * static_cast<size_t>(size), -7));
  comm->allgather(mine.data, gathered.data, 2 * sizeof(int));
  const auto g = gathered.host();
  bool gathered_ok = true;
  for (int r = 0; r < size; ++r) gathered_ok = gathered_ok && g[2 * r] == r * 3 && g[2 * r + 1] == r * 3 + 1;
  check(gathered_ok, "allgather", rank);

  // A ring of send/recv through backend memory.
  BackendBuffer<int> out(*backend, {100 + rank}), in(*backend, {-1});
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (rank % 2 == 0) {
    comm->send(out.data, sizeof(int), next, 5);
    comm->recv(in.data, sizeof(int), prev, 5);
  } else {
    comm->recv(in.data, sizeof(int), prev, 5);
    comm->send(out.data, sizeof(int), next, 5);
  }
  check(in.host()[0] == 100 + prev, "send and recv around a ring", rank);

  // Even and odd ranks apart.
  auto part = comm->split(rank % 2, rank);
  BackendBuffer<float> one(*backend, {1.0f});
  part->allreduce_sum(one.data, 1);
  check(one.host()[0] == static_cast<float>((size + 1 - rank % 2) / 2), "allreduce_sum within a split part", rank);
  check(part->backend().find("staged") != std::string::npos, "a split part is staged too", rank);
  if (part->size() == 1) {  // np=2: one rank per part, whose collectives stay on the device
    BackendBuffer<int> solo(*backend, {rank}), solo_out(*backend, {-1});
    part->allgather(solo.data, solo_out.data, sizeof(int));
    check(solo_out.host()[0] == rank, "allgather at one rank copies", rank);
  }

  const int64_t before = comm->collective_count();
  comm->barrier();
  check(comm->collective_count() == before, "barrier is not counted as a data collective", rank);
  return mpi_check::verdict(*host);
}
