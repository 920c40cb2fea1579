// A file named as a model plugin whose descriptor says it is a sync plugin.
#include "mgtrain/plugin.hpp"

namespace {
const mgt::ConfigKey kKeys[] = {{"sync.unused", mgt::KeyType::integer, "0", "unused"}};
class NoSync final : public mgt::SyncStrategy {
 public:
  explicit NoSync(const mgt::ConfigSection&) {}
  void setup(mgt::Communicator&, mgt::ParameterStore&) override {}
  bool end_backward(int64_t) override { return true; }
};
}  // namespace

MGT_SYNC_PLUGIN("wrongkind", "1.0.0", "a sync plugin in a model plugin's file", kKeys, NoSync)
