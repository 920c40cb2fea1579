// A model plugin as built before SDK 1.0, which recorded plugin ABI version 19: the loader must
// refuse it and say to rebuild it.
#include "mgtrain/plugin.hpp"
#undef MGTRAIN_PLUGIN_ABI_VERSION
#define MGTRAIN_PLUGIN_ABI_VERSION 19u

namespace {
const mgt::ConfigKey kKeys[] = {{"model.unused", mgt::KeyType::integer, "0", "unused"}};
class Tiny final : public mgt::SequentialModel {
 public:
  explicit Tiny(const mgt::ConfigSection&) { add(mgt::make_flatten("flatten")); }
};
}  // namespace

MGT_MODEL_PLUGIN("badabi", "1.0.0", "reports plugin ABI version 19, from before SDK 1.0", kKeys, Tiny)
