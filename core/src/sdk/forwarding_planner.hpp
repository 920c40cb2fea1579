#pragma once
// A LayerPlanner that hands every question to another: the base of the executor's planners that
// change one thing (what a layer allocates is recorded, which layouts it is told), so that a
// method added to LayerPlanner is forwarded in one place.
#include "mgtrain/layers.hpp"

namespace mgt {

class ForwardingPlanner : public LayerPlanner {
 public:
  explicit ForwardingPlanner(LayerPlanner& inner) : inner_(inner) {}
  Ops& ops() override { return inner_.ops(); }
  void* allocate(size_t bytes) override { return inner_.allocate(bytes); }
  bool bf16() const override { return inner_.bf16(); }
  int64_t shards() const override { return inner_.shards(); }
  int64_t input_block() const override { return inner_.input_block(); }
  int64_t output_block() const override { return inner_.output_block(); }
  bool fused_relu() const override { return inner_.fused_relu(); }
  const void* upload(const void* host, size_t bytes) override { return inner_.upload(host, bytes); }

 protected:
  LayerPlanner& inner_;
};

}  // namespace mgt
