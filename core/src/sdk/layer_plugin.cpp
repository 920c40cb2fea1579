#include "mgtrain/layer_plugin.hpp"

#include <mutex>
#include <utility>

namespace mgt {

namespace {

std::mutex& lookup_mutex() {
  static std::mutex mutex;
  return mutex;
}

LayerPluginLookup& current_lookup() {
  static LayerPluginLookup lookup;
  return lookup;
}

}  // namespace

void set_layer_plugin_lookup(LayerPluginLookup lookup) {
  const std::lock_guard<std::mutex> lock(lookup_mutex());
  current_lookup() = std::move(lookup);
}

std::unique_ptr<LayerFactory> find_layer_plugin(const std::string& kind) {
  LayerPluginLookup lookup;
  {
    const std::lock_guard<std::mutex> lock(lookup_mutex());
    lookup = current_lookup();
  }
  return lookup ? lookup(kind) : nullptr;
}

}  // namespace mgt
