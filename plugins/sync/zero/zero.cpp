// Sync plugin `zero`: a ZeRO-style sharded optimizer, stage 1 (Rajbhandari et al., 2020). The flat
// gradient is cut into buckets of about sync.bucket_mb and each bucket into one piece per rank;
// rank r's shard is its piece of every bucket. After backward each bucket is reduce-scattered, so
// a rank receives the summed gradient of its own pieces only; the core then updates that shard,
// with optimizer state for the shard alone (1 / ranks of the memory), and each bucket's updated
// pieces are all-gathered into every rank's parameters. Checkpoints get the whole state gathered
// on rank 0, and a resume scatters it, so they load at any world size and under any strategy.
// With sync.deterministic, the global batch is cut into sync.micro_shards micro-shards summed in
// one fixed tree (as allreduce does) and every rank takes its shard from that whole sum: the same
// bits at any power-of-two number of ranks, and those of allreduce in deterministic mode.
#include <algorithm>
#include <cstring>
#include <vector>

#include "mgtrain/deterministic_reduce.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.bucket_mb", mgt::KeyType::positive_real, "4",
     "size of one reduce-scatter and all-gather bucket in MB, cut into one piece per rank"},
    {"sync.deterministic", mgt::KeyType::boolean, "false",
     "sum sync.micro_shards micro-shard gradients in one fixed tree: identical bits at any "
     "power-of-two number of ranks, and those of allreduce in deterministic mode"},
    {"sync.micro_shards", mgt::KeyType::positive_integer, "8",
     "deterministic mode: micro-shards per global batch (a power of two, a multiple of the ranks)"},
};

class Zero final : public mgt::SyncStrategy, public mgt::OptimizerSharding {
 public:
  explicit Zero(const mgt::ConfigSection& config)
      : bucket_mb_(config.get_real("bucket_mb")),
        deterministic_(config.get_bool("deterministic")),
        micro_shards_(config.get_int("micro_shards")) {}

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    comm_ = &comm;
    store_ = &store;
    rank_ = static_cast<size_t>(comm.rank());
    ranks_ = static_cast<size_t>(comm.size());
    // A bucket is a whole number of pieces of at least one float; the bound keeps the product
    // of a huge sync.bucket_mb inside size_t.
    const double floats = std::min(bucket_mb_ * 1e6 / sizeof(float), 1e15);
    const size_t bucket = std::max<size_t>(static_cast<size_t>(floats) / ranks_, 1) * ranks_;
    const size_t flat = store.flat_size();
    if (flat == 0) throw mgt::ConfigError("sync.name = zero: the model has no parameters to shard");
    size_t padded = 0;  // the largest bucket, padded to whole pieces
    for (size_t begin = 0; begin < flat; begin += bucket) {
      Bucket b;
      b.begin = begin;
      b.end = std::min(flat, begin + bucket);
      b.piece = (b.end - b.begin + ranks_ - 1) / ranks_;
      b.offset = shard_size_;
      shard_size_ += b.piece;
      buckets_.push_back(b);
      padded = std::max(padded, b.piece * ranks_);
    }
    shard_params_.assign(shard_size_, 0.0f);
    shard_grads_.assign(shard_size_, 0.0f);
    // Only the last bucket can be short of whole pieces: it goes through this copy.
    staging_.assign(buckets_.back().piece * ranks_, 0.0f);
    padded_bucket_floats_ = padded;
    partial_.assign(padded / ranks_, 0.0f);
    received_.assign(padded / ranks_, 0.0f);
    if (!deterministic_) return;
    shards_per_rank_ = mgt::DeterministicReducer::shards_per_rank(micro_shards_, comm);
    reducer_.setup(comm, store, shards_per_rank_);
  }
  int64_t accumulation_steps() const override { return deterministic_ ? shards_per_rank_ : 1; }
  bool micro_batches_are_shards() const override { return deterministic_; }
  mgt::OptimizerSharding* sharding() override { return this; }

  bool end_backward(int64_t micro_step) override {
    if (deterministic_) {
      reducer_.add_shard();
      if (micro_step != shards_per_rank_ - 1) return false;
      reducer_.finish();
      take_pieces(store_->grads_data(), shard_grads_.data());
    } else {
      reduce_scatter();
    }
    take_pieces(store_->params_data(), shard_params_.data());
    return true;
  }

  size_t shard_size() const override { return shard_size_; }
  float* shard_params() override { return shard_params_.data(); }
  float* shard_grads() override { return shard_grads_.data(); }
  bool whole_gradient() const override { return deterministic_; }
  void sum_over_ranks(double* values, size_t count) override { comm_->allreduce_sum(values, count); }

  void gather_parameters() override {
    float* params = store_->params_data();
    for (const Bucket& b : buckets_) {
      const bool whole_pieces = b.piece * ranks_ == b.end - b.begin;
      float* recv = whole_pieces ? params + b.begin : staging_.data();
      comm_->allgather(shard_params_.data() + b.offset, recv, b.piece, mgt::ElementType::f32);
      if (!whole_pieces) std::copy(staging_.begin(), staging_.begin() + (b.end - b.begin), params + b.begin);
    }
  }

  void gather_state(const float* shard, float* whole) override {
    std::vector<float> bucket(padded_bucket_floats_);
    for (const Bucket& b : buckets_) {
      comm_->allgather(shard + b.offset, bucket.data(), b.piece, mgt::ElementType::f32);
      if (rank_ == 0) std::copy(bucket.begin(), bucket.begin() + (b.end - b.begin), whole + b.begin);
    }
  }

  void scatter_state(const float* whole, float* shard) override {
    std::vector<float> bucket(padded_bucket_floats_);
    for (const Bucket& b : buckets_) {
      const size_t floats = b.piece * ranks_;
      if (rank_ == 0) {
        std::copy(whole + b.begin, whole + b.end, bucket.begin());
        std::fill(bucket.begin() + (b.end - b.begin), bucket.begin() + floats, 0.0f);
      }
      comm_->broadcast(bucket.data(), floats * sizeof(float), 0);
      std::copy(bucket.begin() + rank_ * b.piece, bucket.begin() + (rank_ + 1) * b.piece, shard + b.offset);
    }
  }

 private:
  // A range of the flat buffer whose piece r, `piece` floats from begin + r * piece, is rank r's;
  // the last rank's piece of the last bucket may reach past the end (padding). `offset`: where
  // this rank's piece starts in its shard.
  struct Bucket {
    size_t begin = 0, end = 0, piece = 0, offset = 0;
  };

  // This rank's pieces of a whole flat buffer into its shard, the padding zero.
  void take_pieces(const float* whole, float* shard) const {
    for (const Bucket& b : buckets_) {
      const size_t from = std::min(b.end, b.begin + rank_ * b.piece);
      const size_t to = std::min(b.end, from + b.piece);
      std::copy(whole + from, whole + to, shard + b.offset);
      std::fill(shard + b.offset + (to - from), shard + b.offset + b.piece, 0.0f);
    }
  }

  // Each bucket's sum over the ranks, this rank receiving its own piece of it.
  void reduce_scatter() {
    const float* grads = store_->grads_data();
    for (const Bucket& b : buckets_) {
      const float* send = grads + b.begin;
      if (b.piece * ranks_ != b.end - b.begin) {  // short of whole pieces: padded with zeros
        std::copy(grads + b.begin, grads + b.end, staging_.begin());
        std::fill(staging_.begin() + (b.end - b.begin), staging_.end(), 0.0f);
        send = staging_.data();
      }
      ring_reduce_scatter(send, shard_grads_.data() + b.offset, b.piece);
    }
  }

  // One bucket (ranks x piece floats) reduce-scattered around the ring: in ranks - 1 steps each
  // rank passes a partial sum of one piece to the next and adds its own piece to the one it
  // receives, so rank r ends with piece r summed over all ranks, each rank having sent and received
  // ranks - 1 pieces. Open MPI's MPI_Reduce_scatter_block (Communicator::reduce_scatter_sum)
  // measured slower on one node than its all-reduce of the whole bucket (docs/benchmarks.md).
  // With two ranks each sum is of two terms, so the bits are those of an all-reduce.
  void ring_reduce_scatter(const float* send, float* recv, size_t piece) {
    if (ranks_ == 1) {
      std::copy(send, send + piece, recv);
      return;
    }
    const int right = static_cast<int>((rank_ + 1) % ranks_), left = static_cast<int>((rank_ + ranks_ - 1) % ranks_);
    const size_t bytes = piece * sizeof(float);
    // The partial sum passed on at step k is of piece (rank - 1 - k), starting with this rank's own.
    const size_t first = (rank_ + ranks_ - 1) % ranks_;
    std::copy(send + first * piece, send + (first + 1) * piece, partial_.begin());
    for (size_t k = 1; k < ranks_; ++k) {
      auto incoming = comm_->irecv(received_.data(), bytes, left, kRingTag);
      auto outgoing = comm_->isend(partial_.data(), bytes, right, kRingTag);
      incoming->wait();
      outgoing->wait();
      const float* own = send + ((rank_ + ranks_ - 1 - k) % ranks_) * piece;
      float* sum = k + 1 == ranks_ ? recv : partial_.data();
      for (size_t i = 0; i < piece; ++i) sum[i] = received_[i] + own[i];
    }
  }

  double bucket_mb_;
  bool deterministic_;
  int64_t micro_shards_, shards_per_rank_ = 1;
  mgt::Communicator* comm_ = nullptr;
  mgt::ParameterStore* store_ = nullptr;
  size_t rank_ = 0, ranks_ = 1;
  std::vector<Bucket> buckets_;
  size_t shard_size_ = 0;
  size_t padded_bucket_floats_ = 0;
  std::vector<float> shard_params_, shard_grads_;
  std::vector<float> staging_;             // the last bucket, padded to whole pieces
  std::vector<float> partial_, received_;  // the ring's piece in flight each way
  static constexpr int kRingTag = 7201;    // a built-in plugin's, below Communicator::kPluginTagFirst
  mgt::DeterministicReducer reducer_;
};

}  // namespace

MGT_SYNC_PLUGIN("zero", "1.0.0",
                "ZeRO stage 1: gradients reduce-scattered in buckets, each rank updating its shard of the parameters "
                "with the optimizer state of that shard alone, parameters all-gathered",
                kKeys, Zero)
