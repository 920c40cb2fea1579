// Layer plugin `swish`: the Swish layer of swish.hpp by name in the config-declared `layers` model,
// as the SDK's layers are: `model.layers = flatten, linear 256, swish, linear 10`. The entry takes
// no arguments; mgtrain names the layers swish1, swish2, ... and gives each the shape before it.
#include <memory>

#include "mgtrain/layer_plugin.hpp"
#include "mgtrain/plugin.hpp"
#include "swish.hpp"

namespace {

class SwishFactory final : public mgt::LayerFactory {
 public:
  std::unique_ptr<mgt::Layer> make(const mgt::LayerEntry& entry) const override {
    if (!entry.args.empty()) throw mgt::ConfigError("swish takes no arguments, got '" + entry.args.front() + "'");
    return std::make_unique<SwishLayer>(entry.name);
  }
};

}  // namespace

MGT_LAYER_PLUGIN("swish", "1.0.0", "Swish (x * sigmoid(x)) for model.layers, written once over mgt::Ops", SwishFactory)
