#include "mgtrain/gradient_buckets.hpp"

#include <algorithm>
#include <chrono>

namespace mgt {

void GradientBuckets::setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes, bool overlap) {
  comm_ = &comm;
  overlap_ = overlap;
  store_ = &store;
  buckets_.clear();
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
}

void GradientBuckets::launch(size_t index) {
  Bucket& bucket = buckets_[index];
  if (AllreduceObserver* observer = comm_->allreduce_observer())
    observer->bucket_started(index, (bucket.end - bucket.begin) * sizeof(float));
  bucket.request = comm_->iallreduce_sum(store_->grads_data() + bucket.begin, bucket.end - bucket.begin);
}

void GradientBuckets::mark_ready(const std::vector<ParamHandle>& handles) {
  if (comm_->size() == 1 || !overlap_) return;
  for (ParamHandle h : handles) {
    const size_t index = bucket_of_param_[h];
    if (++buckets_[index].ready == buckets_[index].params) launch(index);
  }
  // Open MPI has no asynchronous progress: testing the oldest request lets it advance while
  // backward goes on.
  while (next_to_progress_ < buckets_.size() && buckets_[next_to_progress_].request &&
         buckets_[next_to_progress_].request->test()) {
    if (AllreduceObserver* observer = comm_->allreduce_observer()) observer->bucket_finished(next_to_progress_);
    ++next_to_progress_;
  }
}

double GradientBuckets::finish() {
  if (comm_->size() == 1) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  AllreduceObserver* observer = comm_->allreduce_observer();
  if (!overlap_) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      const Bucket& b = buckets_[i];
      if (observer) observer->bucket_started(i, (b.end - b.begin) * sizeof(float));
      comm_->allreduce_sum(store_->grads_data() + b.begin, b.end - b.begin);
      if (observer) observer->bucket_finished(i);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (!buckets_[i].request) launch(i);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.request->wait();
    // The buckets before next_to_progress_ were seen complete during backward, and said so then.
    if (observer && i >= next_to_progress_) observer->bucket_finished(i);
    b.request.reset();
    b.ready = 0;
  }
  next_to_progress_ = 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace mgt
