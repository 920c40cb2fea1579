#pragma once
// optimizer.weight_decay_on = matrices: which elements of the optimizer's range the weight decay
// applies to (Optimizer::set_decay_mask).
#include <cstdint>
#include <string>
#include <vector>

#include "mgtrain/parameters.hpp"
#include "mgtrain/sync.hpp"

namespace mgt {

// 1 for the elements of parameters of rank 2 and more (weight matrices, embeddings, convolution
// kernels), 0 elsewhere, over the range this rank's optimizer updates: the store's whole layout, a
// sharded optimizer's shard (cut by the strategy's scatter_state, as optimizer state is on a
// resume: a collective, every rank calls it) or a serving rank's range (by its serve_offset).
// Throws ConfigError naming `sync_name` for a serving strategy that does not say its range.
std::vector<uint8_t> matrices_decay_mask(const ParameterStore& store, SyncStrategy& sync, bool trains,
                                         const std::string& sync_name);

}  // namespace mgt
