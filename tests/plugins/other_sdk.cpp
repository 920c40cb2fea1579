// A model plugin that records another SDK version than the core's: the next minor (built with
// MGTRAIN_TEST_NEWER_MINOR: it may use what this core lacks) or the next major. The loader must
// refuse both, naming both versions.
#include "mgtrain/plugin.hpp"
#undef MGTRAIN_PLUGIN_ABI_VERSION
#ifdef MGTRAIN_TEST_NEWER_MINOR
#define MGTRAIN_PLUGIN_ABI_VERSION ((MGTRAIN_SDK_VERSION_MAJOR << 16) | (MGTRAIN_SDK_VERSION_MINOR + 1u))
#define MGTRAIN_TEST_NAME "newerminor"
#else
#define MGTRAIN_PLUGIN_ABI_VERSION ((MGTRAIN_SDK_VERSION_MAJOR + 1u) << 16)
#define MGTRAIN_TEST_NAME "nextmajor"
#endif

namespace {
const mgt::ConfigKey kKeys[] = {{"model.unused", mgt::KeyType::integer, "0", "unused"}};
class Tiny final : public mgt::SequentialModel {
 public:
  explicit Tiny(const mgt::ConfigSection&) { add(mgt::make_flatten("flatten")); }
};
}  // namespace

MGT_MODEL_PLUGIN(MGTRAIN_TEST_NAME, "1.0.0", "records another SDK version", kKeys, Tiny)
