#include "runtime/decay_mask.hpp"

#include <algorithm>
#include <cstddef>

#include "mgtrain/error.hpp"
#include "mgtrain/sharding.hpp"

namespace mgt {

std::vector<uint8_t> matrices_decay_mask(const ParameterStore& store, SyncStrategy& sync, bool trains,
                                         const std::string& sync_name) {
  // Floats, so that a shard is cut by the strategy's scatter_state as optimizer state is.
  std::vector<float> whole(store.flat_size(), 0.0f);
  for (const ParamInfo& p : store.params())
    if (p.shape.size() >= 2) std::fill_n(whole.begin() + static_cast<std::ptrdiff_t>(p.offset), p.numel, 1.0f);
  std::vector<float> range;
  if (OptimizerSharding* sharding = sync.sharding()) {
    range.resize(sharding->shard_size());
    sharding->scatter_state(whole.data(), range.data());
  } else if (trains) {
    range = std::move(whole);
  } else {
    const ServingRole* serving = sync.serving();
    const size_t offset = serving->serve_offset(), size = serving->serve_size();
    MGT_CHECK(offset != SIZE_MAX && offset + size <= whole.size(), ConfigError,
              "optimizer.weight_decay_on = matrices: sync.name = " + sync_name +
                  " does not say which range of the parameters a serving rank updates "
                  "(ServingRole::serve_offset); set optimizer.weight_decay_on = all");
    range.assign(whole.begin() + static_cast<std::ptrdiff_t>(offset),
                 whole.begin() + static_cast<std::ptrdiff_t>(offset + size));
  }
  std::vector<uint8_t> mask(range.size());
  std::transform(range.begin(), range.end(), mask.begin(), [](float v) { return v != 0.0f ? 1 : 0; });
  return mask;
}

}  // namespace mgt
