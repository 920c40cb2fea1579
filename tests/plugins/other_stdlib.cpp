// A model plugin whose build fingerprint names another C++ standard library (libc++): the loader
// must refuse it, naming both libraries.
#include "mgtrain/plugin.hpp"
#undef MGT_STDLIB_ID
#define MGT_STDLIB_ID "libc++-99000-abi1"

namespace {
const mgt::ConfigKey kKeys[] = {{"model.unused", mgt::KeyType::integer, "0", "unused"}};
class Tiny final : public mgt::SequentialModel {
 public:
  explicit Tiny(const mgt::ConfigSection&) { add(mgt::make_flatten("flatten")); }
};
}  // namespace

MGT_MODEL_PLUGIN("otherstdlib", "1.0.0", "another standard library", kKeys, Tiny)
