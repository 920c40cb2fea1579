// The MPI communicator under mpirun: collectives give the right values on every rank, several
// non-blocking all-reduces can be in flight, and a wait on a silent peer ends at its deadline.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "kernels/cpu/bf16.hpp"
#include "mgtrain/error.hpp"
#include "mpi_check.hpp"

using mpi_check::check;

int main(int argc, char** argv) {
  mgt::MpiRuntime mpi(&argc, &argv);
  auto comm = mgt::make_mpi_communicator();
  const int rank = comm->rank(), size = comm->size();
  comm->set_timeout_seconds(60);

  check(size >= 2, "needs at least 2 ranks", rank);
  check(comm->local_size() == size && comm->node() == 0, "one node: local size equals size", rank);
  check(comm->local_rank() == rank, "local rank equals rank on one node", rank);

  // Sum of (rank + i) over ranks, for sizes spanning a few bytes to several MB.
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + static_cast<int>(i % 7));
    comm->allreduce_sum(v.data(), n);
    bool ok = true;
    for (size_t i = 0; i < n; ++i) {
      const float expect = static_cast<float>(size * (size - 1) / 2 + size * static_cast<int>(i % 7));
      ok = ok && v[i] == expect;
    }
    check(ok, "allreduce_sum of " + std::to_string(n) + " floats", rank);
  }

  // Several non-blocking all-reduces in flight, completed in reverse order.
  std::vector<std::vector<float>> buckets(4, std::vector<float>(5000, 1.0f));
  std::vector<std::unique_ptr<mgt::CommRequest>> requests;
  for (auto& b : buckets) requests.push_back(comm->iallreduce_sum(b.data(), b.size()));
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) (*it)->wait();
  bool all = true;
  for (auto& b : buckets)
    for (float x : b) all = all && x == static_cast<float>(size);
  check(all, "four iallreduce_sum in flight", rank);

  double d[2] = {0.5, static_cast<double>(rank)};
  comm->allreduce_sum(d, 2);
  check(d[0] == 0.5 * size && d[1] == size * (size - 1) / 2.0, "allreduce_sum of doubles", rank);

  int64_t m = rank * 10;
  comm->allreduce_max(&m, 1);
  check(m == (size - 1) * 10, "allreduce_max", rank);

  int value = rank == 1 ? 4242 : -1;
  comm->broadcast(&value, sizeof(value), 1);
  check(value == 4242, "broadcast from rank 1", rank);

  // Typed collectives. Reduce-scatter: block r of every rank summed into rank r's; FP32 exact here
  // (small integers), in place too (the sum in the first block).
  const size_t block = 1000;
  std::vector<float> blocks(block * static_cast<size_t>(size)), mine_sum(block);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(rank + static_cast<int>(i % 5));
  comm->reduce_scatter_sum(blocks.data(), mine_sum.data(), block, mgt::ElementType::f32);
  bool scatter_ok = true;
  for (size_t i = 0; i < block; ++i) {
    const size_t at = static_cast<size_t>(rank) * block + i;
    scatter_ok =
        scatter_ok && mine_sum[i] == static_cast<float>(size * (size - 1) / 2 + size * static_cast<int>(at % 5));
  }
  check(scatter_ok, "reduce_scatter_sum of floats", rank);
  comm->reduce_scatter_sum(blocks.data(), blocks.data(), block, mgt::ElementType::f32);
  check(std::equal(mine_sum.begin(), mine_sum.end(), blocks.begin()), "reduce_scatter_sum in place", rank);
  // bfloat16: half the bytes; small integers are exact in bfloat16, and so is 1 + 2^-7 (its 8
  // significant bits) and a few ranks' sum of it.
  std::vector<uint16_t> halves(block * static_cast<size_t>(size)), half_sum(block);
  for (size_t i = 0; i < halves.size(); ++i)
    halves[i] = mgt::kernels::to_bf16(static_cast<float>(rank + 1) * static_cast<float>(1 + i % 3));
  comm->reduce_scatter_sum(halves.data(), half_sum.data(), block, mgt::ElementType::bf16);
  bool half_ok = true;
  for (size_t i = 0; i < block; ++i) {
    const size_t at = static_cast<size_t>(rank) * block + i;
    half_ok = half_ok && mgt::kernels::from_bf16(half_sum[i]) ==
                             static_cast<float>(size * (size + 1) / 2) * static_cast<float>(1 + at % 3);
  }
  check(half_ok, "reduce_scatter_sum of bfloat16", rank);
  std::vector<uint16_t> fine(100, mgt::kernels::to_bf16(1.0f + 1.0f / 128.0f));
  comm->allreduce_sum(fine.data(), fine.size(), mgt::ElementType::bf16);
  const float fine_sum = mgt::kernels::from_bf16(fine[0]);
  check(fine_sum == static_cast<float>(size) * (1.0f + 1.0f / 128.0f),
        "allreduce_sum of bfloat16: " + std::to_string(fine_sum), rank);
  // Reduce to one root, and the non-blocking typed all-reduce, reduce and broadcast: the pieces
  // of the hierarchical all-reduce.
  {
    const int root = size - 1;
    const float expected = static_cast<float>(size * (size + 1) / 2);
    std::vector<float> values(64, static_cast<float>(rank + 1));
    comm->reduce_sum(values.data(), values.size(), mgt::ElementType::f32, root);
    if (rank == root) check(values[0] == expected && values[63] == expected, "reduce_sum of floats to a root", rank);
    std::vector<uint16_t> halves16(64, mgt::kernels::to_bf16(static_cast<float>(rank + 1)));
    auto reduce = comm->ireduce_sum(halves16.data(), halves16.size(), mgt::ElementType::bf16, root);
    reduce->wait();
    if (rank == root)
      check(mgt::kernels::from_bf16(halves16[5]) == expected, "ireduce_sum of bfloat16 to a root", rank);
    std::vector<uint16_t> all16(64, mgt::kernels::to_bf16(static_cast<float>(rank + 1)));
    auto allreduce = comm->iallreduce_sum_typed(all16.data(), all16.size(), mgt::ElementType::bf16);
    while (!allreduce->test()) {
    }
    check(mgt::kernels::from_bf16(all16[7]) == expected, "iallreduce_sum_typed of bfloat16", rank);
    std::vector<float> from_root(16, rank == root ? 2.5f : 0.0f);
    auto broadcast = comm->ibroadcast(from_root.data(), from_root.size() * sizeof(float), root);
    broadcast->wait();
    check(from_root[15] == 2.5f, "ibroadcast from a root", rank);
  }
  std::vector<float> pieces(static_cast<size_t>(size) * 3);
  const float three[3] = {static_cast<float>(rank), 0.5f, -1.0f};
  comm->allgather(three, pieces.data(), 3, mgt::ElementType::f32);
  bool pieces_ok = true;
  for (int r = 0; r < size; ++r) pieces_ok = pieces_ok && pieces[static_cast<size_t>(r) * 3] == static_cast<float>(r);
  check(pieces_ok, "allgather of typed elements", rank);
  check(mgt::Communicator::kPluginTagFirst > 7201 && mgt::Communicator::kPluginTagLast <= 32767,
        "the plugins' tags lie above the core's and within MPI's guaranteed range", rank);

  std::vector<int> gathered(static_cast<size_t>(size));
  const int mine = rank * rank;
  comm->allgather(&mine, gathered.data(), sizeof(int));
  bool gather_ok = true;
  for (int r = 0; r < size; ++r) gather_ok = gather_ok && gathered[static_cast<size_t>(r)] == r * r;
  check(gather_ok, "allgather", rank);

  // Ring: send to the next rank, receive from the previous.
  int token = rank, received = -1;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (rank % 2 == 0) {
    comm->send(&token, sizeof(token), next, 7);
    comm->recv(&received, sizeof(received), prev, 7);
  } else {
    comm->recv(&received, sizeof(received), prev, 7);
    comm->send(&token, sizeof(token), next, 7);
  }
  check(received == prev, "ring send/recv", rank);

  // A peer that never answers: rank 0's receive must end at the deadline, naming rank 1.
  comm->barrier();
  if (rank == 0) {
    comm->set_timeout_seconds(1.0);
    comm->set_step(17);
    static int never = 0;  // outlives this block: the abandoned receive completes later
    std::string message;
    try {
      comm->recv(&never, sizeof(never), 1, 99);
    } catch (const mgt::CommError& e) {
      message = e.what();
    }
    check(message.find("timed out") != std::string::npos && message.find("rank 1") != std::string::npos &&
              message.find("step 17") != std::string::npos,
          "deadline names the step and the peer: '" + message + "'", rank);
    comm->set_timeout_seconds(60);
  }
  comm->barrier();
  // Satisfy the abandoned receive so nothing is left pending at finalize.
  if (rank == 1) {
    int late = 1;
    comm->send(&late, sizeof(late), 0, 99);
  }
  comm->barrier();

  return mpi_check::verdict(*comm);
}
