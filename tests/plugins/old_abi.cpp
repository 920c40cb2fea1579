// A model plugin built with the other libstdc++ ABI (-D_GLIBCXX_USE_CXX11_ABI=0), as a plugin author
// with other compiler flags gets: its calls into libmgtrain name std::string of the old ABI, which
// libmgtrain does not define, so the dynamic loader fails on them. The loader must refuse it with
// the fingerprint's line, naming both ABIs, not the loader's undefined symbol.
#include "mgtrain/plugin.hpp"

namespace {
const mgt::ConfigKey kKeys[] = {{"model.width", mgt::KeyType::positive_integer, "8", "unused"}};
class Tiny final : public mgt::SequentialModel {
 public:
  explicit Tiny(const mgt::ConfigSection& config) {
    add(mgt::make_flatten("flatten"));
    add(mgt::make_linear("fc1", 784, config.get_int("width")));
  }
};
}  // namespace

MGT_MODEL_PLUGIN("oldabi", "1.0.0", "the other libstdc++ ABI", kKeys, Tiny)
