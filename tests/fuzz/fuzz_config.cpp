// libFuzzer target: INI text -> Config::from_string -> validate(). A bad input must end in
// mgt::ConfigError; anything else thrown, a sanitizer report or a broken invariant is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "runtime/core_keys.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_config: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The core's keys plus one optional key of every type, standing in for a plugin's section, so
// every branch of the type checks and getters is reachable.
const std::vector<mgt::ConfigKey>& all_keys() {
  static const std::vector<mgt::ConfigKey> keys = [] {
    std::vector<mgt::ConfigKey> k = mgt::core_config_keys();
    k.push_back({"model.s", mgt::KeyType::string, "", "string"});
    k.push_back({"model.p", mgt::KeyType::path, "", "path"});
    k.push_back({"model.i", mgt::KeyType::integer, "0", "integer"});
    k.push_back({"model.pi", mgt::KeyType::positive_integer, "1", "positive integer"});
    k.push_back({"model.ni", mgt::KeyType::non_negative_integer, "0", "non-negative integer"});
    k.push_back({"model.r", mgt::KeyType::real, "0", "real"});
    k.push_back({"model.pr", mgt::KeyType::positive_real, "1", "positive real"});
    k.push_back({"model.nr", mgt::KeyType::non_negative_real, "0", "non-negative real"});
    k.push_back({"model.b", mgt::KeyType::boolean, "false", "boolean"});
    k.push_back({"model.l", mgt::KeyType::integer_list, "1", "integer list"});
    k.push_back({"model.c", mgt::KeyType::choice, "a", "choice", "a|bb|"});
    return k;
  }();
  return keys;
}

// After a successful validate() every getter of a key's own type must succeed.
void read_all(const mgt::Config& c, const std::vector<mgt::ConfigKey>& keys) {
  for (const auto& k : keys) {
    switch (k.type) {
      case mgt::KeyType::string:
      case mgt::KeyType::path:
      case mgt::KeyType::choice:
        (void)c.get_string(k.key);
        break;
      case mgt::KeyType::integer:
      case mgt::KeyType::positive_integer:
      case mgt::KeyType::non_negative_integer:
        (void)c.get_int(k.key);
        break;
      case mgt::KeyType::real:
      case mgt::KeyType::positive_real:
      case mgt::KeyType::non_negative_real:
        (void)c.get_real(k.key);
        break;
      case mgt::KeyType::boolean:
        (void)c.get_bool(k.key);
        break;
      case mgt::KeyType::integer_list:
        (void)c.get_int_list(k.key);
        break;
    }
  }
}

std::string dump(const mgt::Config& c) {
  std::string out;
  for (const auto& [k, v] : c.values()) out += k + "=" + v.value + "\n";
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  mgt::Config config;
  try {
    config = mgt::Config::from_string(text, "fuzz.ini");
  } catch (const mgt::ConfigError&) {
    return 0;
  }
  for (const auto& [key, value] : config.values()) {
    // Every parsed key is `section.key`, and a value is one line.
    if (key.find('.') == std::string::npos) fail("key without a section", key);
    if (value.value.find('\n') != std::string::npos) fail("value spans lines", value.value);
  }
  (void)config.to_ini();

  // The core's keys alone: what `mgtrain train` does before plugins add theirs.
  try {
    mgt::Config core = config;
    core.validate(mgt::core_config_keys());
    read_all(core, mgt::core_config_keys());
  } catch (const mgt::ConfigError&) {
  }

  const auto& keys = all_keys();
  try {
    config.validate(keys);
  } catch (const mgt::ConfigError&) {
    return 0;
  }
  // ConfigError from here on is a finding: it escapes and aborts the run.
  read_all(config, keys);
  // A validated config survives to_ini() and back unchanged: checkpoints store it this way and
  // `mgtrain eval` parses it again.
  mgt::Config back = mgt::Config::from_string(config.to_ini(), "stored");
  back.validate(keys);
  if (dump(back) != dump(config)) fail("to_ini round trip changed the config", dump(config) + "---\n" + dump(back));
  return 0;
}
