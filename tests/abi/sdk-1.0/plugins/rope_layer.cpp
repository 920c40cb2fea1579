// Layer plugin `rope`: rotary position embedding (rope.hpp) by name in the config-declared `layers`
// model, over [B, T, D] activations: `embed 256 32, rope, residual { ... }`, or `rope 500000` for
// another base than 10000.
#include <cstdlib>
#include <memory>

#include "mgtrain/layer_plugin.hpp"
#include "mgtrain/plugin.hpp"
#include "rope.hpp"

namespace {

class RopeFactory final : public mgt::LayerFactory {
 public:
  std::unique_ptr<mgt::Layer> make(const mgt::LayerEntry& entry) const override {
    if (entry.args.size() > 1) throw mgt::ConfigError("rope takes at most one argument (the base)");
    float base = 10000.0f;
    if (!entry.args.empty()) {
      char* end = nullptr;
      base = std::strtof(entry.args[0].c_str(), &end);
      if (end == entry.args[0].c_str() || *end != '\0' || !(base > 1.0f))
        throw mgt::ConfigError("rope's base must be a number above 1, got '" + entry.args[0] + "'");
    }
    auto layer = std::make_unique<RopeLayer>(entry.name, base, entry.input.size() == 3 ? entry.input[1] : 0,
                                             entry.input.empty() ? 0 : entry.input.back());
    layer->output_shape(entry.input);  // refuses a shape that is not [B, T, D], D even
    return layer;
  }
};

}  // namespace

MGT_LAYER_PLUGIN("rope", "1.0.0", "rotary position embedding over [B, T, D], tables built on the host", RopeFactory)
