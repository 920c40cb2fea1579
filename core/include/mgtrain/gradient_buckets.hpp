#pragma once
// Bucketed all-reduce of the flat gradient buffer. Parameters are grouped into buckets of about
// `bucket_bytes` in reverse layer order (the order backward produces them). With `overlap`, each
// bucket's non-blocking all-reduce starts as soon as all its gradients are final and runs while
// the rest of backward does; without it, the buckets are reduced after backward by blocking
// all-reduces, which Open MPI runs about 1.5x faster on one node (its tuned collectives against
// libnbc) and which leave the cores to compute. Sync strategies built on all-reduce share it.
// The communicator's AllreduceObserver, when set, hears each bucket's start and completion.
#include <cstddef>
#include <memory>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

class MGT_API GradientBuckets {
 public:
  void setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes, bool overlap);
  // Starts every bucket whose gradients are now all final; advances those in flight.
  void mark_ready(const std::vector<ParamHandle>& handles);
  // Starts what is left and waits for every bucket; the buffer then holds the sum over ranks.
  // Returns the seconds spent waiting (communication not hidden behind backward).
  double finish();

  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // float range of the flat gradient buffer
    size_t params = 0;          // parameters in the bucket
    size_t ready = 0;           // of them final in this backward pass
    std::unique_ptr<CommRequest> request;
  };
  void launch(size_t index);

  Communicator* comm_ = nullptr;
  ParameterStore* store_ = nullptr;
  std::vector<Bucket> buckets_;          // in launch order: last layer first
  std::vector<size_t> bucket_of_param_;  // parameter handle -> bucket index
  size_t next_to_progress_ = 0;
  bool overlap_ = false;
};

}  // namespace mgt
