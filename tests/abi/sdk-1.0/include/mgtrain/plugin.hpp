#pragma once
// The plugin ABI. A plugin is a shared library libmgtrain-<kind>-<name>.so exporting one symbol,
// `mgtrain_plugin_descriptor`. The loader reads abi_version first and refuses a plugin of another
// SDK major version (or a newer minor) before touching any other field; it also refuses a kind
// mismatch or a build fingerprint whose standard library differs from the core's
// (mgtrain/build_fingerprint.hpp), naming the file and both values.
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "mgtrain/build_fingerprint.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/layer_plugin.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/schedule.hpp"
#include "mgtrain/sync.hpp"

// The SDK's version. Within a major version the SDK only grows, so a plugin built against 1.0 loads
// into every mgtrain of SDK 1.x: the minor is bumped when something is added (a plugin using it
// needs that minor or later), the major on any change that breaks a built plugin.
// docs/plugins.md ("The SDK's promise") says what is stable and lists each version's changes.
#define MGTRAIN_SDK_VERSION_MAJOR 1u
#define MGTRAIN_SDK_VERSION_MINOR 0u
// What a plugin records: its SDK's major << 16 | minor. Before SDK 1.0 it was a plain counter
// (the last one 19), which reads as major 0.
#define MGTRAIN_PLUGIN_ABI_VERSION ((MGTRAIN_SDK_VERSION_MAJOR << 16) | MGTRAIN_SDK_VERSION_MINOR)
#define MGTRAIN_PLUGIN_SYMBOL "mgtrain_plugin_descriptor"

namespace mgt {

extern "C" {
struct PluginDescriptor {
  uint32_t abi_version;  // MGTRAIN_PLUGIN_ABI_VERSION at the plugin's build
  // Fields are only appended, in a new minor version; the core reads one only from a plugin whose
  // minor has it.
  const char* kind;  // "model", "optimizer", "sync", "layer" or "schedule"
  const char* name;
  const char* version;
  const char* description;        // one line
  const char* build_fingerprint;  // MGT_BUILD_FINGERPRINT: "<compiler>/<standard library>"
  const ConfigKey* config_keys;   // the plugin's keys, full "section.key" names
  size_t config_key_count;
  // Returns a new Model*, Optimizer*, SyncStrategy*, LayerFactory* or LearningRateSchedule* (by
  // kind) built from the plugin's section (a layer plugin's: none, its layers take their arguments
  // from their entry).
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
// A learning-rate schedule (mgtrain/schedule.hpp), chosen by train.lr_schedule = NAME; its KEYS
// are in the [schedule] section.
#define MGT_SCHEDULE_PLUGIN(NAME, VERSION, DESCRIPTION, KEYS, TYPE) \
  MGT_PLUGIN_IMPL("schedule", ::mgt::LearningRateSchedule, NAME, VERSION, DESCRIPTION, KEYS, TYPE)

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
