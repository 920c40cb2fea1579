#pragma once
// A layer of a plugin's own, used by name in the config-declared `layers` model as the SDK's
// layers are: a layer plugin, libmgtrain-layer-<kind>.so (MGT_LAYER_PLUGIN, mgtrain/plugin.hpp),
// turns a list entry `<kind> ARG...` into a layer. The `layers` model asks for a kind it does not
// know while it is built; the core looks in the plugin path, as for every plugin.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/export.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

// One entry of model.layers for a layer plugin.
struct LayerEntry {
  std::string name;               // the layer's name in the model: "<kind>1", "res1.<kind>2"
  std::vector<std::string> args;  // the words after the kind, as written
  Shape input;                    // what the entry before gives, for a batch of 1: [1, ...]
};

class MGT_API LayerFactory {
 public:
  virtual ~LayerFactory() = default;
  // The layer of `entry`. Throws ConfigError saying what is wrong with the arguments or the input
  // shape (the model adds the entry's position and text).
  virtual std::unique_ptr<Layer> make(const LayerEntry& entry) const = 0;
};

// How the core finds a layer plugin by kind while it builds a model: a factory, or null when no
// layer plugin of that kind is in the plugin path. Set and cleared by the core around a model's
// construction.
using LayerPluginLookup = std::function<std::unique_ptr<LayerFactory>(const std::string& kind)>;
MGT_API void set_layer_plugin_lookup(LayerPluginLookup lookup);

// The layer plugin of `kind`, or null: none in the plugin path, or no lookup set (a model built
// outside the core). Throws PluginError when a library of that name is there but refused.
MGT_API std::unique_ptr<LayerFactory> find_layer_plugin(const std::string& kind);

}  // namespace mgt
