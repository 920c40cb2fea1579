#include "mgtrain/gradient_buckets.hpp"

#include "gradient_buckets_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "mgtrain/error.hpp"
#include "shared_memory_allreduce.hpp"

namespace mgt {

namespace {

// kernels::to_bf16 and from_bf16 (round to nearest even, NaN kept a NaN), inline: the wire's
// loops run over the whole gradient every step, and a call per element would cost more than the
// rounding.
inline uint16_t round_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float widen_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The shared update's side of the optimizer step (GradientBuckets::sharding()): this rank's part
// of the node's shared parameters, of the summed gradient, and of the optimizer state.
class SharedUpdate final : public OptimizerSharding {
 public:
  SharedUpdate(Communicator& comm, SharedMemoryAllreduce& shared, ParameterStore& store)
      : comm_(comm), shared_(shared), store_(store), flat_(store.flat_size()) {
    for (float* place : shared_.gradient_places())
      if (place != store_.grads_data()) views_.push_back(Tensor::view(place, {static_cast<int64_t>(flat_)}));
  }

  // The step's reduce-scatter. The next backward then writes where the coming one wants it
  // (slot_writes.hpp), over what is there; this step's gradient is read through shard_grads()
  // from here on. The store is pointed there by swapping in the view of that place, made once
  // above (the view swapped out is the place the store left): no allocation in the step.
  void reduce_scatter() {
    shared_.reduce_scatter_sum();
    float* const next = shared_.gradients();
    if (next == store_.grads_data()) return;
    const auto view = std::find_if(views_.begin(), views_.end(), [next](Tensor& v) { return v.data() == next; });
    MGT_CHECK(view != views_.end(), Error, "shared update: the next gradient is in none of its places");
    store_.swap_grads(*view);
    store_.discard_grads();
  }

  size_t shard_size() const override { return shared_.part_floats(); }
  float* shard_params() override { return shared_.params() + shared_.part_begin(); }
  float* shard_grads() override { return shared_.summed() + shared_.part_begin(); }
  bool whole_gradient() const override { return false; }
  void sum_over_ranks(double* values, size_t count) override { shared_.sum_over_ranks(values, count); }
  void gather_parameters() override { shared_.wait_for_parts(); }

  // Checkpoints only: every part to rank 0, in the order of the local ranks (which the ranks of one
  // node need not follow).
  void gather_state(const float* shard, float* whole) override {
    const size_t part = shared_.part_floats(), ranks = static_cast<size_t>(shared_.local_size());
    std::vector<float> by_rank(part * ranks);
    comm_.allgather(shard, by_rank.data(), part, ElementType::f32);
    if (comm_.rank() != 0) return;
    for (size_t local = 0; local < ranks && local * part < flat_; ++local) {
      const float* from = by_rank.data() + static_cast<size_t>(shared_.world_ranks()[local]) * part;
      std::copy(from, from + std::min(part, flat_ - local * part), whole + local * part);
    }
  }

  void scatter_state(const float* whole, float* shard) override {
    std::vector<float> padded(shared_.part_floats() * static_cast<size_t>(shared_.local_size()), 0.0f);
    if (comm_.rank() == 0) std::copy(whole, whole + flat_, padded.begin());
    comm_.broadcast(padded.data(), padded.size() * sizeof(float), 0);
    const auto from = padded.begin() + static_cast<std::ptrdiff_t>(shared_.part_begin());
    std::copy(from, from + static_cast<std::ptrdiff_t>(shared_.part_floats()), shard);
  }

 private:
  Communicator& comm_;
  SharedMemoryAllreduce& shared_;
  ParameterStore& store_;
  size_t flat_;                // the store's flat size: the parts' floats before the padding
  std::vector<Tensor> views_;  // of the places backward may write but the store's now
};

}  // namespace

BucketOptions bucket_options(const ConfigSection& section) {
  BucketOptions options;
  if (section.has("overlap")) options.overlap = section.get_bool("overlap");
  if (section.has("hierarchical")) {
    const std::string h = section.get_string("hierarchical");
    options.hierarchy = h == "on" ? Hierarchy::on : h == "off" ? Hierarchy::off : Hierarchy::automatic;
  }
  if (section.has("shared_memory")) {
    const std::string s = section.get_string("shared_memory");
    options.shared_memory = s == "on" ? Hierarchy::on : s == "off" ? Hierarchy::off : Hierarchy::automatic;
  }
  if (section.has("wire")) options.wire = section.get_string("wire") == "bf16" ? WireFormat::bf16 : WireFormat::fp32;
  return options;
}

void refuse_in_deterministic_mode(const BucketOptions& options) {
  if (options.wire == WireFormat::bf16)
    throw ConfigError(
        "config key 'sync.wire' = bf16: expected fp32 with sync.deterministic = true (its fixed tree sums FP32 "
        "gradients)");
  if (options.hierarchy == Hierarchy::on)
    throw ConfigError(
        "config key 'sync.hierarchical' = on: expected auto or off with sync.deterministic = true (it reduces in "
        "its own fixed tree)");
}

GradientBuckets::GradientBuckets() : impl_(std::make_unique<GradientBucketsImpl>()) {}
GradientBuckets::~GradientBuckets() = default;
void GradientBuckets::setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes,
                            const BucketOptions& options) {
  impl_->setup(comm, store, bucket_bytes, options);
}
void GradientBuckets::mark_ready(const std::vector<ParamHandle>& handles) { impl_->mark_ready(handles); }
double GradientBuckets::finish() { return impl_->finish(); }
size_t GradientBuckets::bucket_count() const { return impl_->bucket_count(); }
bool GradientBuckets::hierarchical() const { return impl_->hierarchical(); }
bool GradientBuckets::shared_memory() const { return impl_->shared_memory(); }
OptimizerSharding* GradientBuckets::sharding() const { return impl_->sharding(); }
std::vector<SyncStateArray> GradientBuckets::checkpoint_state() const { return impl_->checkpoint_state(); }
void GradientBuckets::restore_state(const std::vector<SyncStateArray>& saved, int saved_ranks,
                                    const std::string& strategy) {
  impl_->restore_state(saved, saved_ranks, strategy);
}

GradientBucketsImpl::GradientBucketsImpl() = default;
GradientBucketsImpl::~GradientBucketsImpl() = default;

void GradientBucketsImpl::setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes,
                                const BucketOptions& options) {
  comm_ = &comm;
  overlap_ = options.overlap;
  wire_ = options.wire;
  store_ = &store;
  buckets_.clear();
  node_.reset();
  node_broadcast_.reset();
  leaders_.reset();
  update_.reset();
  shared_.reset();
  const auto& params = store.params();
  bucket_of_param_.assign(params.size(), 0);
  const size_t bucket_floats = std::max<size_t>(1, bucket_bytes / sizeof(float));
  // Walk from the last parameter back: the flat layout is in declaration order, so each bucket
  // is one contiguous range (its parameters' padding included).
  Bucket current;
  for (size_t i = params.size(); i-- > 0;) {
    const size_t end = i + 1 < params.size() ? params[i + 1].offset : store.flat_size();
    if (current.params == 0) current.end = end;
    current.begin = params[i].offset;
    ++current.params;
    bucket_of_param_[i] = buckets_.size();
    if (current.end - current.begin >= bucket_floats || i == 0) {
      buckets_.push_back(std::move(current));
      current = Bucket{};
    }
  }
  if (wire_ == WireFormat::bf16) {
    wire16_.assign(store.flat_size(), 0);
    residual_.assign(store.flat_size(), 0.0f);
  } else {
    wire16_.clear();
    residual_.clear();
  }

  // Shared memory where it applies; a rank that cannot have it says why, and all go through MPI.
  // More than one rank on some node, over MPI (not NCCL, nor the GPU path's staging). Across nodes
  // only when asked: on links slower than memory, one copy per node crosses either way, and the
  // local ranks' parts were measured no faster than Open MPI's own all-reduce (docs/scaling.md).
  if (options.shared_memory == Hierarchy::on && (overlap_ || wire_ != WireFormat::fp32))
    throw ConfigError(
        std::string("config key 'sync.shared_memory' = on: expected auto or off with ") +
        (overlap_ ? "sync.overlap = true (it reduces after backward, blocking)" : "sync.wire = bf16 (it sums FP32)"));
  int64_t spread[2] = {comm.local_size(), comm.node()};  // most ranks on a node, last node
  if (comm.size() > 1) comm.allreduce_max(spread, 2);
  const bool wanted =
      options.shared_memory == Hierarchy::on || (options.shared_memory == Hierarchy::automatic && spread[1] == 0);
  if (wanted && !overlap_ && wire_ == WireFormat::fp32 && comm.backend() == "mpi" && spread[0] > 1) {
    std::string why_not;
    // The core updates its host store in place; a step's own copy (is_view) keeps the whole update.
    const bool shared_update = options.shared_update && spread[1] == 0 && !store.is_view();
    shared_ = SharedMemoryAllreduce::create(comm, store.flat_size(), why_not, shared_update);
    if (shared_)
      store.place_grads(shared_->gradients(), shared_->gradients_memory());
    else if (comm.rank() == 0)
      std::fprintf(stderr, "mgtrain: note: sync.shared_memory: %s; the all-reduce goes through MPI\n", why_not.c_str());
    if (shared_ && shared_update) {
      // Every rank holds the same parameters here (one seed): local rank 0 copies them in, and no
      // rank goes on before it has.
      store.place_params(shared_->params(), shared_->memory(), shared_->local_rank() == 0);
      comm.barrier();
      update_ = std::make_unique<SharedUpdate>(comm, *shared_, store);
      // One reduce-scatter of the whole buffer after backward: blocking, so buckets would only
      // add barriers.
      Bucket whole;
      whole.begin = 0;
      whole.end = store.flat_size();
      whole.params = params.size();
      buckets_.clear();
      buckets_.push_back(std::move(whole));
      bucket_of_param_.assign(params.size(), 0);
    }
  }

  bool hierarchical = options.hierarchy == Hierarchy::on && !shared_;
  // More than one node: some rank's node index is above 0. NCCL (another backend) already follows
  // the topology itself.
  if (options.hierarchy == Hierarchy::automatic && !shared_ && comm.size() > 1 && comm.backend() == "mpi")
    hierarchical = spread[1] > 0;
  if (hierarchical && comm.size() > 1) {
    // Ranks keep their node's order, the leader (local rank 0) first; the ranks of one local rank
    // across the nodes form a part each, of which local rank 0's is the leaders'.
    node_ = comm.split(comm.node(), comm.local_rank());
    node_broadcast_ = comm.split(comm.node(), comm.local_rank());
    leaders_ = comm.split(comm.local_rank(), comm.node());
  }
  stages_.clear();
  if (node_) stages_.push_back(kNodeReduce);
  if (!node_ || node_->rank() == 0) stages_.push_back(kLeaders);
  if (node_) stages_.push_back(kNodeBroadcast);
  for (size_t& next : next_start_) next = 0;
  next_finished_ = 0;
}

Communicator& GradientBucketsImpl::stage_comm(int stage) {
  switch (stage) {
    case kNodeReduce:
      return *node_;
    case kNodeBroadcast:
      return *node_broadcast_;
    default:
      return node_ ? *leaders_ : *comm_;
  }
}

void* GradientBucketsImpl::wire_data(const Bucket& b) {
  return wire_ == WireFormat::bf16 ? static_cast<void*>(wire16_.data() + b.begin)
                                   : static_cast<void*>(store_->grads_data() + b.begin);
}

// The bucket's first stage: with the bfloat16 wire its gradient (plus the residual) is rounded
// first, and the residual keeps what the rounding dropped.
void GradientBucketsImpl::launch(size_t index) {
  Bucket& b = buckets_[index];
  if (AllreduceObserver* observer = comm_->allreduce_observer())
    observer->bucket_started(index, wire_count(b) * element_bytes(wire_type()));
  if (wire_ == WireFormat::bf16) {
    float* grads = store_->grads_data();
    for (size_t i = b.begin; i < b.end; ++i) {
      const float e = grads[i] + residual_[i];
      wire16_[i] = round_bf16(e);
      residual_[i] = e - widen_bf16(wire16_[i]);
    }
  }
  if (node_) {
    // The parts' timeout messages name the step too.
    for (Communicator* part : {node_.get(), node_broadcast_.get(), leaders_.get()}) part->set_step(comm_->step());
  }
  start_stage(index, 0);
}

void GradientBucketsImpl::start_stage(size_t index, int position) {
  Bucket& b = buckets_[index];
  const int stage = stages_[static_cast<size_t>(position)];
  Communicator& part = stage_comm(stage);
  void* data = wire_data(b);
  const size_t count = wire_count(b);
  if (!overlap_) {
    if (stage == kNodeReduce)
      part.reduce_sum(data, count, wire_type(), 0);
    else if (stage == kNodeBroadcast)
      part.broadcast(data, count * element_bytes(wire_type()), 0);
    else if (update_)
      static_cast<SharedUpdate&>(*update_).reduce_scatter();  // the one bucket, the whole buffer
    else if (shared_)
      shared_->allreduce_sum(static_cast<float*>(data), b.begin, count);
    else
      part.allreduce_sum(data, count, wire_type());
  } else if (stage == kNodeReduce) {
    b.request = part.ireduce_sum(data, count, wire_type(), 0);
  } else if (stage == kNodeBroadcast) {
    b.request = part.ibroadcast(data, count * element_bytes(wire_type()), 0);
  } else if (wire_ == WireFormat::fp32) {
    b.request = part.iallreduce_sum(static_cast<float*>(data), count);
  } else {
    b.request = part.iallreduce_sum_typed(data, count, wire_type());
  }
  b.started = position + 1;
  ++next_start_[stage];
}

// The bucket's sum is complete on this rank: widen it from the wire.
void GradientBucketsImpl::end_bucket(size_t index) {
  Bucket& b = buckets_[index];
  if (wire_ == WireFormat::bf16) {
    float* grads = store_->grads_data();
    for (size_t i = b.begin; i < b.end; ++i) grads[i] = widen_bf16(wire16_[i]);
  }
  if (AllreduceObserver* observer = comm_->allreduce_observer()) observer->bucket_finished(index);
  b.request.reset();
  b.ready = 0;
  b.started = 0;
}

// Starts each stage whose previous one is complete, in bucket order per stage (so every rank
// issues the collectives of each communicator in the same order), and ends the buckets that are
// through. Open MPI has no asynchronous progress: testing the requests lets them advance while
// backward goes on.
void GradientBucketsImpl::progress() {
  const int stages = static_cast<int>(stages_.size());
  for (bool moved = true; moved;) {
    moved = false;
    // First stages in bucket order, as the buckets' gradients become final.
    size_t& first = next_start_[stages_[0]];
    while (first < buckets_.size() && buckets_[first].ready == buckets_[first].params && buckets_[first].started == 0) {
      launch(first);
      moved = true;
    }
    for (int position = 1; position < stages; ++position) {
      const size_t index = next_start_[stages_[static_cast<size_t>(position)]];
      if (index >= buckets_.size()) continue;
      Bucket& b = buckets_[index];
      if (b.started == position && b.request->test()) {
        start_stage(index, position);
        moved = true;
      }
    }
  }
  while (next_finished_ < buckets_.size() && buckets_[next_finished_].started == stages &&
         buckets_[next_finished_].request->test())
    end_bucket(next_finished_++);
}

void GradientBucketsImpl::mark_ready(const std::vector<ParamHandle>& handles) {
  if (comm_->size() == 1 || !overlap_) return;
  for (ParamHandle h : handles) ++buckets_[bucket_of_param_[h]].ready;
  progress();
}

double GradientBucketsImpl::finish() {
  if (comm_->size() == 1) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  const int stages = static_cast<int>(stages_.size());
  if (!overlap_) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      launch(i);
      for (int position = 1; position < stages; ++position) start_stage(i, position);
      end_bucket(i);
    }
  } else {
    for (Bucket& b : buckets_) b.ready = b.params;
    progress();
    // The oldest bucket's current stage, then whatever that lets start or end; a later bucket's
    // stage never starts before an earlier one's, so this ends every bucket in order.
    while (next_finished_ < buckets_.size()) {
      buckets_[next_finished_].request->wait();
      progress();
    }
  }
  for (size_t& next : next_start_) next = 0;
  next_finished_ = 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<SyncStateArray> GradientBucketsImpl::checkpoint_state() const {
  if (wire_ != WireFormat::bf16) return {};
  return {{"residual", residual_}};
}

void GradientBucketsImpl::restore_state(const std::vector<SyncStateArray>& saved, int saved_ranks,
                                        const std::string& strategy) {
  if (wire_ != WireFormat::bf16) return;
  // A rank's residual is its own delayed gradient. On another number of ranks the ranks' shares
  // of the data differ, so the residuals start again from zero (at most one step's rounding is
  // lost), which rank 0 says.
  if (saved_ranks != comm_->size()) {
    if (comm_->rank() == 0)
      std::fprintf(stderr,
                   "mgtrain: note: sync %s: the checkpoint's run had %d rank(s), this one %d: the bfloat16 "
                   "wire's error-feedback residuals start again from zero\n",
                   strategy.c_str(), saved_ranks, comm_->size());
    return;
  }
  for (const auto& array : saved) {
    if (array.name != "residual") continue;
    MGT_CHECK(array.values.size() == residual_.size(), DataError,
              "sync " + strategy + ": the checkpoint's residual of rank " + std::to_string(comm_->rank()) + " holds " +
                  std::to_string(array.values.size()) + " values, the model's gradient " +
                  std::to_string(residual_.size()));
    residual_ = array.values;
  }
}

}  // namespace mgt
