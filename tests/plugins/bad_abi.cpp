// A model plugin built to report another plugin ABI version: the loader must refuse it.
#include "mgtrain/plugin.hpp"
#undef MGTRAIN_PLUGIN_ABI_VERSION
#define MGTRAIN_PLUGIN_ABI_VERSION 999u

namespace {
const mgt::ConfigKey kKeys[] = {{"model.unused", mgt::KeyType::integer, "0", "unused"}};
class Tiny final : public mgt::SequentialModel {
 public:
  explicit Tiny(const mgt::ConfigSection&) { add(mgt::make_flatten("flatten")); }
};
}  // namespace

MGT_MODEL_PLUGIN("badabi", "1.0.0", "reports ABI version 999", kKeys, Tiny)
