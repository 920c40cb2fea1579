// The all-reduce sync plugins under mpirun, loaded from disk: bucketed, overlapped all-reduce
// equals one all-reduce of the whole buffer, and gradient accumulation communicates only on the
// last micro-batch of a step; only the parameter server has a serving role, which says which
// ranks train; zero's shards cover the buffer once, its reduce-scatter gives each rank the sum of
// its shard, and its gathers and scatters put every element back where it was. Hierarchical and
// bfloat16-wire all-reduces stay within their bounds of the flat one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "kernels/cpu/bf16.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/gradient_buckets.hpp"
#include "mpi_check.hpp"
#include "runtime/core_keys.hpp"

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
  // checkpoint.every_steps: the parameter server reads it (it writes no intermediate checkpoint).
  mgt::Config config =
      mgt::Config::from_string("[checkpoint]\nevery_steps = 0\n[sync]\nname = " + name + "\n" + extra, "test");
  auto keys = registry.config_keys("sync", name);
  keys.push_back({"sync.name", mgt::KeyType::string, nullptr, "sync"});
  keys.push_back({"checkpoint.every_steps", mgt::KeyType::non_negative_integer, "0", "checkpoints"});
  config.validate(keys);
  return registry.create_sync(name, config);
}

using mpi_check::check;

// zero, with buckets of about 100 floats over a buffer of 688 (the parameters' 637 floats, each
// aligned to 16): at np=3 the last bucket (94 floats) is short of whole pieces, so its padding is
// exercised too.
void check_zero(mgt::Communicator& comm, mgt::PluginRegistry& registry) {
  const int rank = comm.rank();
  const auto odd_store = [&](mgt::ParameterStore& store) {
    store.declare("a.weight", {31, 17}, mgt::Init::he_uniform, 17);
    store.declare("a.bias", {17}, mgt::Init::zeros, 1);
    store.declare("b.weight", {5, 17}, mgt::Init::he_uniform, 17);
    store.declare("b.bias", {5}, mgt::Init::zeros, 1);
    store.declare("c.bias", {3}, mgt::Init::zeros, 1);
    store.finalize();
    store.initialize(7);
    float* g = store.grads_data();
    for (size_t i = 0; i < store.flat_size(); ++i)
      g[i] = 0.001f * static_cast<float>((i * 7919u + static_cast<unsigned>(rank) * 31u) % 1000);
  };
  mgt::ParameterStore store, summed;
  odd_store(store);
  odd_store(summed);
  comm.allreduce_sum(summed.grads_data(), summed.flat_size());
  const size_t flat = store.flat_size();
  auto sync = make_sync(registry, "zero", "bucket_mb = 0.0004\n");
  sync->setup(comm, store);
  mgt::OptimizerSharding* shard = sync->sharding();
  check(shard != nullptr && sync->serving() == nullptr, "zero shards the optimizer and every rank trains", rank);
  if (shard != nullptr) {
    const size_t ranks = static_cast<size_t>(comm.size());
    // A bucket is the largest multiple of the ranks up to 100 floats, a piece a rank's share of it.
    const size_t bucket = 100 / ranks * ranks, tail = flat % bucket;
    const size_t expected = flat / bucket * (bucket / ranks) + (tail + ranks - 1) / ranks;
    check(shard->shard_size() == expected,
          "zero's shard is " + std::to_string(shard->shard_size()) + " floats, expected " + std::to_string(expected),
          rank);
    check(!shard->whole_gradient(), "zero outside deterministic mode leaves only the shard's sum", rank);
    const std::vector<float> params(store.params_data(), store.params_data() + flat);
    sync->begin_micro_batch(0);
    for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
    check(sync->end_backward(0), "zero applies every step", rank);
    // The shard's summed gradient, gathered whole on rank 0, is the all-reduced buffer.
    std::vector<float> whole(flat, -1.0f);
    shard->gather_state(shard->shard_grads(), whole.data());
    if (rank == 0) {
      double worst = 0;
      for (size_t i = 0; i < flat; ++i)
        worst = std::max(worst, static_cast<double>(std::fabs(whole[i] - summed.grads_data()[i])));
      check(worst <= 1e-6,
            "reduce-scatter then gather equals the all-reduce (max |diff| " + std::to_string(worst) + ")", rank);
    }
    // Each rank moves its own parameters by one; gathered, every element moved exactly once.
    for (size_t i = 0; i < shard->shard_size(); ++i) shard->shard_params()[i] += 1.0f;
    shard->gather_parameters();
    bool moved_once = true;
    for (size_t i = 0; i < flat; ++i) moved_once = moved_once && store.params_data()[i] == params[i] + 1.0f;
    check(moved_once, "gather_parameters puts every rank's updated shard in every rank's parameters", rank);
    // A whole state scattered from rank 0 and gathered again comes back bit for bit.
    std::vector<float> original(flat), mine(shard->shard_size(), -1.0f), back(flat, 0.0f);
    for (size_t i = 0; i < flat; ++i) original[i] = 0.5f * static_cast<float>(i) - 3.0f;
    shard->scatter_state(rank == 0 ? original.data() : nullptr, mine.data());
    shard->gather_state(mine.data(), rank == 0 ? back.data() : nullptr);
    if (rank == 0)
      check(std::memcmp(back.data(), original.data(), flat * sizeof(float)) == 0,
            "scatter_state then gather_state gives back the whole state", rank);
  }
  for (const char* other : {"allreduce", "grad_accum"}) {
    auto unsharded = make_sync(registry, other, "");
    check(unsharded->sharding() == nullptr, std::string(other) + " does not shard the optimizer", rank);
  }
}

}  // namespace

using mpi_check::check;

int main(int argc, char** argv) {
  mgt::MpiRuntime mpi(&argc, &argv);
  auto comm = mgt::make_mpi_communicator();
  comm->set_timeout_seconds(60);
  const int rank = comm->rank();
  mgt::PluginRegistry registry;
  // "zero": that strategy alone (at a world size the bitwise checks of the others do not hold for).
  if (argc > 1 && std::string(argv[1]) == "zero") {
    check_zero(*comm, registry);
    return mpi_check::verdict(*comm);
  }

  // Reference: one all-reduce of the whole gradient buffer.
  mgt::ParameterStore reference;
  fill_store(reference, rank);
  comm->allreduce_sum(reference.grads_data(), reference.flat_size());

  // allreduce with small buckets through MPI, gradients reported in backward order as a model
  // would; both the blocking path and the one overlapped with backward.
  for (const std::string overlap : {"false", "true"}) {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "allreduce", "bucket_mb = 0.001\nshared_memory = off\noverlap = " + overlap + "\n");
    sync->setup(*comm, store);
    sync->begin_micro_batch(0);
    const int64_t before = comm->collective_count();
    for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
    const bool apply = sync->end_backward(0);
    const int64_t buckets = comm->collective_count() - before;
    check(apply, "allreduce applies every step", rank);
    check(sync->serving() == nullptr, "allreduce has no serving role", rank);
    check(buckets >= 3,
          "1 kB buckets give about one bucket per parameter here (" + std::to_string(buckets) + " all-reduces)", rank);
    check(std::memcmp(store.grads_data(), reference.grads_data(), store.flat_size() * sizeof(float)) == 0,
          "bucketed all-reduce (overlap " + overlap + ") equals one all-reduce of the whole buffer, bit for bit", rank);
  }

  // Through shared memory (GradientBuckets' all-reduce form, blocking): a collective per bucket, the
  // sum in local-rank order, so every rank holds the same bits, equal to MPI's within FP32
  // rounding; twice, for the barriers' second round, and into a store whose gradients then live in
  // the shared memory. `shared_sum` keeps that sum for the shared update's check below.
  std::vector<float> shared_sum;
  {
    mgt::ParameterStore store;
    fill_store(store, rank);
    const float* private_grads = store.grads_data();
    mgt::GradientBuckets buckets;
    buckets.setup(*comm, store, 1000, mgt::BucketOptions{});
    check(buckets.shared_memory() && buckets.sharding() == nullptr,
          "shared memory: the all-reduce form unless the strategy asks for the shared update", rank);
    check(store.grads_data() != private_grads, "shared memory: the store's gradients move into it", rank);
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {
        mgt::ParameterStore fresh;
        fill_store(fresh, rank);
        std::memcpy(store.grads_data(), fresh.grads_data(), store.flat_size() * sizeof(float));
      }
      const int64_t before = comm->collective_count();
      buckets.finish();
      const int64_t buckets_reduced = comm->collective_count() - before;
      check(buckets_reduced >= 3, "shared memory: a collective per bucket (" + std::to_string(buckets_reduced) + ")",
            rank);
      float worst = 0;
      for (size_t i = 0; i < store.flat_size(); ++i)
        worst = std::max(worst, std::fabs(store.grads_data()[i] - reference.grads_data()[i]));
      check(worst <= 1e-5f, "shared-memory all-reduce equals MPI's within 1e-5 (" + std::to_string(worst) + ")", rank);
      std::vector<float> all(store.flat_size() * static_cast<size_t>(comm->size()));
      comm->allgather(store.grads_data(), all.data(), store.flat_size() * sizeof(float));
      bool same = true;
      for (int r = 0; r < comm->size(); ++r)
        same = same && std::memcmp(all.data() + static_cast<size_t>(r) * store.flat_size(), store.grads_data(),
                                   store.flat_size() * sizeof(float)) == 0;
      check(same, "shared memory: every rank holds the same bits", rank);
    }
    shared_sum.assign(store.grads_data(), store.grads_data() + store.flat_size());
  }

  // The shared update (allreduce's default on one node): the ranks share the parameters, each sums
  // its part of the gradient alone, in one collective, to the bits of the all-reduce form above;
  // the core's step agreement sums over the ranks; every rank's updated part is seen by all; the
  // optimizer state's parts gather to rank 0 and scatter back. Three times, for the barriers'
  // rounds and for the three ways of a rank's gradient into its slot, which the first three steps
  // take in turn (sdk/slot_writes.hpp): a plain copy, a streamed copy, backward writing the slot.
  {
    mgt::ParameterStore store;
    fill_store(store, rank);
    const std::vector<float> initial(store.params_data(), store.params_data() + store.flat_size());
    auto sync = make_sync(registry, "allreduce", "bucket_mb = 0.001\n");
    sync->setup(*comm, store);
    mgt::OptimizerSharding* shard = sync->sharding();
    check(shard != nullptr && store.params_placed(), "shared update: the parameters move into shared memory", rank);
    if (shard == nullptr) return mpi_check::verdict(*comm);
    const size_t flat = store.flat_size(), part = shard->shard_size();
    const size_t begin = static_cast<size_t>(shard->shard_grads() - store.grads_data());
    check(std::equal(initial.begin(), initial.end(), store.params_data()),
          "shared update: the shared parameters are the ones each rank had", rank);
    check(shard->shard_params() == store.params_data() + begin && begin % 16 == 0 && part % 16 == 0 &&
              part * static_cast<size_t>(comm->size()) >= flat &&
              part * static_cast<size_t>(comm->size()) < flat + 16 * comm->size(),
          "shared update: this rank's part, whole cache lines, at the same place in the parameters and gradients (" +
              std::to_string(begin) + " + " + std::to_string(part) + " of " + std::to_string(flat) + ")",
          rank);
    std::vector<size_t> begins(static_cast<size_t>(comm->size()));
    comm->allgather(&begin, begins.data(), sizeof(size_t));
    std::sort(begins.begin(), begins.end());
    bool tiled = true;
    for (size_t r = 0; r < begins.size(); ++r) tiled = tiled && begins[r] == r * part;
    check(tiled, "shared update: the parts tile the buffer, one per rank", rank);
    std::vector<const float*> written;  // where each round's "backward" wrote
    for (int round = 0; round < 3; ++round) {
      written.push_back(store.grads_data());
      mgt::ParameterStore fresh;
      fill_store(fresh, rank);
      std::memcpy(store.grads_data(), fresh.grads_data(), flat * sizeof(float));
      sync->begin_micro_batch(0);
      const int64_t before = comm->collective_count();
      for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
      check(sync->end_backward(0), "shared update applies every step", rank);
      check(comm->collective_count() - before == 1, "shared update: one collective, the reduce-scatter", rank);
      bool sum_is_shared = true;
      for (size_t i = begin; i < begin + part; ++i)
        sum_is_shared = sum_is_shared &&
                        (i < flat ? std::memcmp(&shard->shard_grads()[i - begin], &shared_sum[i], sizeof(float)) == 0
                                  : shard->shard_grads()[i - begin] == 0.0f);
      check(sum_is_shared, "shared update: this rank's part holds the all-reduce form's sum, bit for bit", rank);
      double checks[2] = {static_cast<double>(rank + 1), 1.0};
      shard->sum_over_ranks(checks, 2);
      const double n = comm->size();
      check(checks[0] == n * (n + 1) / 2 && checks[1] == n, "shared update: the step's checks summed over the ranks",
            rank);
      for (size_t i = 0; i < part && begin + i < flat; ++i)
        shard->shard_params()[i] = -static_cast<float>(begin + i) - static_cast<float>(round);
      shard->gather_parameters();
      bool all_parts = true;
      for (size_t i = 0; i < flat; ++i)
        all_parts = all_parts && store.params_data()[i] == -static_cast<float>(i) - static_cast<float>(round);
      check(all_parts, "shared update: every rank's updated part is every rank's", rank);
    }
    check(written[0] == written[1] && written[2] != written[0],
          "shared update: the third step's backward writes its slot, the first two a buffer of its own", rank);
    std::vector<float> state(part), whole(rank == 0 ? flat : 0);
    for (size_t i = 0; i < part; ++i) state[i] = begin + i < flat ? static_cast<float>(begin + i) : 0.0f;
    shard->gather_state(state.data(), whole.data());
    bool gathered = true;
    for (size_t i = 0; i < whole.size(); ++i) gathered = gathered && whole[i] == static_cast<float>(i);
    check(gathered, "shared update: the parts of a state buffer gather whole on rank 0", rank);
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = 2.0f * static_cast<float>(i);
    shard->scatter_state(whole.data(), state.data());
    bool scattered = true;
    for (size_t i = 0; i < part; ++i)
      scattered = scattered && state[i] == (begin + i < flat ? 2.0f * static_cast<float>(begin + i) : 0.0f);
    check(scattered, "shared update: rank 0's whole state scatters into every rank's part", rank);
  }

  // sync.shared_memory = on where it cannot apply is refused, one line naming the key.
  for (const std::string other : {"overlap = true", "wire = bf16"}) {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "allreduce", "shared_memory = on\n" + other + "\n");
    std::string error;
    try {
      sync->setup(*comm, store);
    } catch (const mgt::ConfigError& e) {
      error = e.what();
    }
    check(error.find("'sync.shared_memory' = on") != std::string::npos,
          "shared_memory = on with " + other + " is refused (" + error + ")", rank);
  }

  // Hierarchical on one node (a leaders' group of one), blocking and overlapped: the flat sum in
  // another order, equal within FP32 rounding.
  for (const std::string overlap : {"false", "true"}) {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "allreduce",
                          "bucket_mb = 0.001\nhierarchical = on\nshared_memory = off\noverlap = " + overlap + "\n");
    sync->setup(*comm, store);
    sync->begin_micro_batch(0);
    for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
    check(sync->end_backward(0), "hierarchical allreduce applies every step", rank);
    float worst = 0;
    for (size_t i = 0; i < store.flat_size(); ++i)
      worst = std::max(worst, std::fabs(store.grads_data()[i] - reference.grads_data()[i]));
    check(worst <= 1e-5f,
          "hierarchical all-reduce (overlap " + overlap + ") equals the flat one within 1e-5 (" +
              std::to_string(worst) + ")",
          rank);
    check(sync->checkpoint_state().empty(), "the FP32 wire keeps no state", rank);
  }

  // The bfloat16 wire, flat and hierarchical, blocking and overlapped: the sum within bfloat16's
  // rounding of the FP32 one, and each rank's residual exactly what rounding its gradient dropped.
  for (const std::string form : {"overlap = false", "overlap = true", "overlap = true\nhierarchical = on",
                                 "overlap = false\nhierarchical = on"}) {
    mgt::ParameterStore store;
    fill_store(store, rank);
    std::vector<float> mine(store.grads_data(), store.grads_data() + store.flat_size());
    auto sync = make_sync(registry, "grad_accum", "accum_steps = 1\nbucket_mb = 0.001\nwire = bf16\n" + form + "\n");
    sync->setup(*comm, store);
    sync->begin_micro_batch(0);
    for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
    check(sync->end_backward(0), "bf16 wire applies", rank);
    float worst = 0;
    for (size_t i = 0; i < store.flat_size(); ++i)
      worst = std::max(worst, std::fabs(store.grads_data()[i] - reference.grads_data()[i]));
    // Values in [-1, 1]: each rank's rounding at most 2^-9, each addition's at most 2^-9 of a
    // partial sum of at most `size`.
    const float bound = static_cast<float>(comm->size()) * static_cast<float>(comm->size() + 1) / 512.0f;
    check(
        worst <= bound,
        "bf16 wire (" + form + ") within " + std::to_string(bound) + " of the FP32 sum (" + std::to_string(worst) + ")",
        rank);
    const auto state = sync->checkpoint_state();
    bool exact = state.size() == 1 && state[0].name == "residual" && state[0].values.size() == mine.size();
    for (size_t i = 0; exact && i < mine.size(); ++i)
      exact = state[0].values[i] == mine[i] - mgt::kernels::from_bf16(mgt::kernels::to_bf16(mine[i]));
    check(exact, "bf16 wire (" + form + "): the residual is what rounding dropped", rank);
    // Restored, it comes back as it was; from another number of ranks, it starts from zero.
    sync->restore_state({{"residual", std::vector<float>(mine.size(), 0.25f)}}, comm->size());
    const auto restored = sync->checkpoint_state();
    check(restored.size() == 1 && restored[0].values[3] == 0.25f, "bf16 wire: the residual is restored", rank);
  }

  // grad_accum with k = 4: three silent micro-steps, then the same all-reduce path.
  {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "grad_accum", "accum_steps = 4\nbucket_mb = 0.001\nshared_memory = off\n");
    sync->setup(*comm, store);
    check(sync->accumulation_steps() == 4, "grad_accum reports its accumulation steps", rank);
    check(sync->serving() == nullptr, "grad_accum has no serving role", rank);
    for (int64_t m = 0; m < 4; ++m) {
      sync->begin_micro_batch(m);
      const int64_t before = comm->collective_count();
      for (size_t h = store.params().size(); h-- > 0;) sync->gradients_ready({h});
      const bool apply = sync->end_backward(m);
      const int64_t used = comm->collective_count() - before;
      if (m < 3) {
        check(!apply && used == 0,
              "micro-step " + std::to_string(m) + " makes no communication (" + std::to_string(used) + " collectives)",
              rank);
      } else {
        check(apply && used >= 3, "the last micro-step all-reduces and applies", rank);
      }
    }
    check(std::memcmp(store.grads_data(), reference.grads_data(), store.flat_size() * sizeof(float)) == 0,
          "grad_accum's all-reduce equals the reference", rank);
  }

  // param_server with one server: the last rank serves the whole buffer, the others train,
  // asynchronously. Roles only: setup does not communicate.
  {
    mgt::ParameterStore store;
    fill_store(store, rank);
    auto sync = make_sync(registry, "param_server", "servers = 1\n");
    sync->setup(*comm, store);
    const mgt::ServingRole* serving = sync->serving();
    check(serving != nullptr, "param_server has a serving role", rank);
    if (serving != nullptr) {
      const int workers = comm->size() - 1;
      check(serving->trains() == (rank < workers), "param_server: the last rank serves, the others train", rank);
      check(serving->train_world(*comm) == workers && serving->train_rank(*comm) == rank,
            "param_server: the training ranks are the first size - 1", rank);
      check(!serving->lockstep() && !serving->finished(), "param_server runs asynchronously", rank);
      if (!serving->trains())
        check(serving->serve_size() == store.flat_size(), "one server holds the whole buffer", rank);
      check(serving->lost_ranks().empty(), "no rank is lost before the run", rank);
    }
  }

  check_zero(*comm, registry);

  return mpi_check::verdict(*comm);
}
