#pragma once
// The plugin ABI. A plugin is a shared library libmgtrain-<kind>-<name>.so exporting one symbol,
// `mgtrain_plugin_descriptor`. The loader reads abi_version first and refuses a mismatch before
// touching any other field; it also refuses a kind mismatch or a build fingerprint whose standard
// library differs from the core's (mgtrain/build_fingerprint.hpp), naming the file and both values.
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "mgtrain/build_fingerprint.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/layer_plugin.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/sync.hpp"

// 2: StepContext::overwrite_grads (backward writes discarded gradients) and
//    ParameterStore::discard_grads.
// 3: SyncStrategy::lost_ranks (a run that went on without some ranks).
// 4: the GPU path: Layer::spec, Optimizer::update_rule, SyncStrategy::reduces_device_memory,
//    ParameterStore::with_buffers.
// 5: layers written once over mgt::Ops (mgtrain/ops.hpp): Layer::plan, forward and backward take
//    a LayerRun, Layer::aliases_input; Layer::spec and LayerSpec are gone. Updates written once:
//    Optimizer::element_update (mgtrain/update_rule.hpp) replaces Optimizer::update_rule.
// 6: SyncStrategy's serving methods (trains, train_rank, train_world, serve, serve_size, lockstep,
//    finished, gather_state, lost_ranks) moved to mgt::ServingRole (mgtrain/serving.hpp), which
//    SyncStrategy::serving() returns.
// 7: ServeContext::write_metrics replaces metrics_path: the core writes and checks the records.
//    ParameterStore buffers (declare_buffer: batch norm's running statistics), Init::ones,
//    Ops::channel_sums and channel_affine.
// 8: statistics over the batch (StepContext::batch_statistics, BatchStatistics, StepContext::pass),
//    Layer::handles_shards, LayerPlanner::shards, WeightGradientSink::shard_gradients,
//    StepContext::after_layer; Communicator::allreduce_sum and reduce_scatter_sum of
//    ElementType (FP32, bfloat16), the plugins' tag range.
// 9: Layer::describe (LayerDescription, mgtrain/layer_description.hpp) and Model::export_layers:
//    what a model computes, for `mgtrain export`. Communicator's AllreduceObserver
//    (set_allreduce_observer), which GradientBuckets tells of each bucket.
// 10: ServingRole's start, first_step, take_snapshot and position (a parameter server's periodic
//     checkpoints and resume); SyncStrategy::checkpoint_state and restore_state.
// 11: SyncStrategy::sharding() and OptimizerSharding (mgtrain/sharding.hpp): a strategy that updates
//     a shard of the parameters on each rank, the optimizer set up for that shard alone.
// 12: Communicator::reduce_sum, ireduce_sum, iallreduce_sum_typed, ibroadcast; GradientBuckets
//     options (hierarchical all-reduce, bfloat16 wire format with error feedback) and state.
// 13: BucketOptions::shared_memory (GradientBuckets sums inside a node through shared memory).
// 14: BucketOptions::shared_update and GradientBuckets::sharding() (the ranks of a node share the
//     parameters and split the optimizer step); ParameterStore::place_params.
// 15: Model::sequence_length() (language models on token files); the transformer's operations in
//     Ops and its layers.
// 16: the element update's `decayed` flag and Optimizer::decay_mask() (optimizer.weight_decay_on);
//     ServingRole::serve_offset(); layer plugins (kind "layer", mgtrain/layer_plugin.hpp).
// 17: Ops::attention_workspace, attention_forward and attention_backward (AttentionShape): fused
//     attention that keeps each query's log-sum-exp instead of the probabilities.
// 18: activations in a channel block (oneDNN's nChw16c): Layer::blocked_activations,
//     LayerPlanner::input_block and output_block, Ops::channel_block and the block arguments of
//     channel_sums, channel_affine, make_conv and make_max_pool. A ReLU run by the layer before it:
//     Layer::fuses_relu, LayerPlanner::fused_relu, Ops::channel_ops_fuse_relu and the mask and
//     relu arguments of channel_sums and channel_affine.
#define MGTRAIN_PLUGIN_ABI_VERSION 18u
#define MGTRAIN_PLUGIN_SYMBOL "mgtrain_plugin_descriptor"

namespace mgt {

extern "C" {
struct PluginDescriptor {
  uint32_t abi_version;  // MGTRAIN_PLUGIN_ABI_VERSION at the plugin's build
  const char* kind;      // "model", "optimizer", "sync" or "layer"
  const char* name;
  const char* version;
  const char* description;        // one line
  const char* build_fingerprint;  // MGT_BUILD_FINGERPRINT: "<compiler>/<standard library>"
  const ConfigKey* config_keys;   // the plugin's keys, full "section.key" names
  size_t config_key_count;
  // Returns a new Model*, Optimizer*, SyncStrategy* or LayerFactory* (by kind) built from the
  // plugin's section (a layer plugin's: none, its layers take their arguments from their entry).
  void* (*create)(const ConfigSection* section);
};
}

}  // namespace mgt

#define MGT_PLUGIN_IMPL(KIND, BASE, NAME, VERSION, DESCRIPTION, KEYS, TYPE)                                     \
  extern "C" __attribute__((visibility("default"))) const ::mgt::PluginDescriptor mgtrain_plugin_descriptor = { \
      MGTRAIN_PLUGIN_ABI_VERSION,                                                                               \
      KIND,                                                                                                     \
      NAME,                                                                                                     \
      VERSION,                                                                                                  \
      DESCRIPTION,                                                                                              \
      MGT_BUILD_FINGERPRINT,                                                                                    \
      KEYS,                                                                                                     \
      std::size(KEYS),                                                                                          \
      [](const ::mgt::ConfigSection* section) -> void* { return static_cast<BASE*>(new TYPE(*section)); }};

// Defines the descriptor of a plugin whose class TYPE is constructible from a ConfigSection.
// KEYS is a static array of mgt::ConfigKey.
#define MGT_MODEL_PLUGIN(NAME, VERSION, DESCRIPTION, KEYS, TYPE) \
  MGT_PLUGIN_IMPL("model", ::mgt::Model, NAME, VERSION, DESCRIPTION, KEYS, TYPE)
#define MGT_OPTIMIZER_PLUGIN(NAME, VERSION, DESCRIPTION, KEYS, TYPE) \
  MGT_PLUGIN_IMPL("optimizer", ::mgt::Optimizer, NAME, VERSION, DESCRIPTION, KEYS, TYPE)
#define MGT_SYNC_PLUGIN(NAME, VERSION, DESCRIPTION, KEYS, TYPE) \
  MGT_PLUGIN_IMPL("sync", ::mgt::SyncStrategy, NAME, VERSION, DESCRIPTION, KEYS, TYPE)

// A layer plugin (mgtrain/layer_plugin.hpp): TYPE, an mgt::LayerFactory constructible with no
// arguments, makes the layers of model.layers' entries `NAME ARG...`. No config keys.
#define MGT_LAYER_PLUGIN(NAME, VERSION, DESCRIPTION, TYPE)                                                      \
  extern "C" __attribute__((visibility("default"))) const ::mgt::PluginDescriptor mgtrain_plugin_descriptor = { \
      MGTRAIN_PLUGIN_ABI_VERSION,                                                                               \
      "layer",                                                                                                  \
      NAME,                                                                                                     \
      VERSION,                                                                                                  \
      DESCRIPTION,                                                                                              \
      MGT_BUILD_FINGERPRINT,                                                                                    \
      nullptr,                                                                                                  \
      0,                                                                                                        \
      [](const ::mgt::ConfigSection*) -> void* { return static_cast<::mgt::LayerFactory*>(new TYPE()); }};
