// The MPI communicator under mpirun: collectives give the right values on every rank, several
// non-blocking all-reduces can be in flight, and a wait on a silent peer ends at its deadline.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
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
