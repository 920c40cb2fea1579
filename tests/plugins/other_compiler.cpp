// A model plugin whose build fingerprint names another compiler on the same standard library, as
// clang on gcc's libstdc++ would: the loader must accept it.
#include "mgtrain/plugin.hpp"
#undef MGT_COMPILER_ID
#define MGT_COMPILER_ID "othercc-99"

namespace {
const mgt::ConfigKey kKeys[] = {{"model.unused", mgt::KeyType::integer, "0", "unused"}};
class Tiny final : public mgt::SequentialModel {
 public:
  explicit Tiny(const mgt::ConfigSection&) { add(mgt::make_flatten("flatten")); }
};
}  // namespace

MGT_MODEL_PLUGIN("othercompiler", "1.0.0", "another compiler, the same standard library", kKeys, Tiny)
