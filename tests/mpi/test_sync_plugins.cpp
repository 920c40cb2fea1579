// The all-reduce sync plugins under mpirun, loaded from disk: bucketed, overlapped all-reduce
// equals one all-reduce of the whole buffer, and gradient accumulation communicates only on the
// last micro-batch of a step.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core_keys.hpp"
#include "mpi_check.hpp"
#include "mpi_communicator.hpp"
#include "plugin_loader.hpp"

namespace {

// A store shaped like a small MLP, with gradients that differ per rank and element.
void fill_store(mgt::ParameterStore& store, int rank) {
  store.declare("fc1.weight", {300, 784}, mgt::Init::he_uniform, 784);
  store.declare("fc1.bias", {300}, mgt::Init::zeros, 1);
  store.declare("fc2.weight", {100, 300}, mgt::Init::he_uniform, 300);
  store.declare("fc2.bias", {100}, mgt::Init::zeros, 1);
  store.declare("fc3.weight", {10, 100}, mgt::Init::he_uniform, 100);
  store.declare("fc3.bias", {10}, mgt::Init::zeros, 1);
  store.finalize();
  float* g = store.grads_data();
  for (size_t i = 0; i < store.flat_size(); ++i)
    g[i] = 1e-3f * static_cast<float>((i * 2654435761u + static_cast<unsigned>(rank) * 97u) % 2001) - 1.0f;
}

std::unique_ptr<mgt::SyncStrategy> make_sync(mgt::PluginRegistry& registry, const std::string& name,
                                             const std::string& extra) {
  mgt::Config config = mgt::Config::from_string("[sync]\nname = " + name + "\n" + extra, "test");
  auto keys = registry.config_keys("sync", name);
  keys.push_back({"sync.name", mgt::KeyType::string, nullptr, "sync"});
  config.validate(keys);
  return registry.create_sync(name, config);
}

}  // namespace

using mpi_check::check;

int main(int argc, char** argv) {
  mgt::MpiRuntime mpi(&argc, &argv);
  auto comm = mgt::make_mpi_communicator();
  comm->set_timeout_seconds(60);
  const int rank = comm->rank();
  mgt::PluginRegistry registry;

  // Reference: one all-reduce of the whole gradient buffer.
  mgt::ParameterStore reference;
  fill_store(reference, rank);
  comm->allreduce_sum(reference.grads_data(), reference.flat_size());

  // allreduce with small buckets, gradients reported in backward order as a model would; both
  // the blocking path and the one overlapped with backward.
  for (const std::string overlap : {"false", "true"}) {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "allreduce", "bucket_mb = 0.001\noverlap = " + overlap + "\n");
    sync->setup(*comm, store);
    sync->begin_micro_batch(0);
    const int64_t before = comm->collective_count();
    for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
    const bool apply = sync->end_backward(0);
    const int64_t buckets = comm->collective_count() - before;
    check(apply, "allreduce applies every step", rank);
    check(buckets >= 3, "1 kB buckets give about one bucket per parameter here (" + std::to_string(buckets) + " all-reduces)", rank);
    check(std::memcmp(store.grads_data(), reference.grads_data(), store.flat_size() * sizeof(float)) == 0,
          "bucketed all-reduce (overlap " + overlap + ") equals one all-reduce of the whole buffer, bit for bit",
          rank);
  }

  // grad_accum with k = 4: three silent micro-steps, then the same all-reduce path.
  {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "grad_accum", "accum_steps = 4\nbucket_mb = 0.001\n");
    sync->setup(*comm, store);
    check(sync->accumulation_steps() == 4, "grad_accum reports its accumulation steps", rank);
    for (int64_t m = 0; m < 4; ++m) {
      sync->begin_micro_batch(m);
      const int64_t before = comm->collective_count();
      for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
      const bool apply = sync->end_backward(m);
      const int64_t used = comm->collective_count() - before;
      if (m < 3) {
        check(!apply && used == 0, "micro-step " + std::to_string(m) + " makes no communication (" +
                                       std::to_string(used) + " collectives)", rank);
      } else {
        check(apply && used >= 3, "the last micro-step all-reduces and applies", rank);
      }
    }
    check(std::memcmp(store.grads_data(), reference.grads_data(), store.flat_size() * sizeof(float)) == 0,
          "grad_accum's all-reduce equals the reference", rank);
  }

  return mpi_check::verdict(*comm);
}
